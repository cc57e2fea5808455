"""The remedy for #3970's agent, ADK's own way back after a restart: the same agent and tool
in an `App` with `ResumabilityConfig(is_resumable=True)`, and a restart that resumes the
invocation the killed process left unfinished (`run_async(invocation_id=...)`, no new
message) instead of sending the request again. A resumed invocation whose last call has no
answer runs that call again from the saved event (ADK's `ResumeAction.REPLAY_CALLS`)
without asking the model; a session whose last said event is the final answer is done.

`make_database_agent` is the same on the `DatabaseSessionService` ADK's docs show for
SQLite (`sqlite+aiosqlite:///...`, needs `google-adk[db]`): the current-release sweep in
the README (a kill while it creates its tables leaves a database no later start opens)."""
from __future__ import annotations

import itertools
import time

import faultsim
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.anthropic_llm import AnthropicLlm
from google.adk.platform import time as adk_time
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

try:
    from google.adk.sessions.database_session_service import DatabaseSessionService
except ImportError:  # google-adk without its [db] extra (SQLAlchemy)
    DatabaseSessionService = None

USER = "operator"


@faultsim.effect("jobs", key=lambda name: f"job-{name}")
def _submit(name: str) -> dict:
    raise RuntimeError("production job runner not configured in this example")


def long_task(name: str) -> str:
    """Run the named long job to completion."""
    return str(_submit(name))


class AdkAgent:
    def __init__(self, env, database: bool = False):
        self.env, self.database = env, database

    def session_service(self):
        if self.database:
            return DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{self.env.store.path}")
        return SqliteSessionService(db_path=str(self.env.store.path))

    async def run(self) -> str:
        env = self.env
        ticks = itertools.count(1)  # as agent.py: a clock that moves on between events
        adk_time.set_time_provider(lambda: time.time() + next(ticks) / 1000)
        sessions = self.session_service()
        agent = LlmAgent(name="ops", model=AnthropicLlm(model=env.model, max_tokens=1024),
                         instruction="You run the operations team's jobs.", tools=[long_task])
        app = App(name="ops", root_agent=agent,
                  resumability_config=ResumabilityConfig(is_resumable=True))
        runner = Runner(app=app, session_service=sessions)
        session = await sessions.get_session(app_name="ops", user_id=USER,
                                             session_id=env.task_id)
        if session is None:
            session = await sessions.create_session(app_name="ops", user_id=USER,
                                                    session_id=env.task_id)
        last = session.events[-1] if session.events else None
        said = [e for e in session.events if e.content and e.content.parts]
        if said and said[-1].author != "user" and said[-1].is_final_response():
            return "".join(p.text or "" for p in said[-1].content.parts).strip()
        if last is not None:  # an invocation the killed process left unfinished
            kwargs = {"invocation_id": last.invocation_id}
        else:
            kwargs = {"new_message": types.Content(role="user",
                                                   parts=[types.Part(text=env.task)])}
        final = ""
        async for event in runner.run_async(user_id=USER, session_id=session.id, **kwargs):
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(p.text or "" for p in event.content.parts)
        return final.strip()


def make_agent(env):
    return AdkAgent(env)


def make_database_agent(env):
    return AdkAgent(env, database=True)
