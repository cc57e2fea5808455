"""google/adk-python #3970's agent, the way ADK's docs write one: an `LlmAgent` on Claude
(`AnthropicLlm`, which builds its own `AsyncAnthropic`: faultsim serves it) with one long
tool, run by a `Runner` on a `SqliteSessionService` (the session store `adk web` and `adk
run` use) in the scenario's SQLite database. A restarted process finds the session and
sends the user's request again, as the report's server does after a restart; the job
goes to the scenario's keyed receiver, so a job run twice is recognised (and deduplicated):
what is judged is whether the session can go on at all, and what it repeats to go on."""
from __future__ import annotations

import itertools
import time

import faultsim
from google.adk.agents import LlmAgent
from google.adk.models.anthropic_llm import AnthropicLlm
from google.adk.platform import time as adk_time
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

APP, USER = "ops", "operator"


@faultsim.effect("jobs", key=lambda name: f"job-{name}")
def _submit(name: str) -> dict:
    raise RuntimeError("production job runner not configured in this example")


def long_task(name: str) -> str:
    """Run the named long job to completion."""
    return str(_submit(name))


class AdkAgent:
    def __init__(self, env):
        self.env = env

    async def run(self) -> str:
        env = self.env
        # ADK stamps each event with its clock and reloads a session's events in that
        # order. faultsim freezes time during an incarnation, where a real clock moves on
        # between two events: through ADK's own hook, its clock is the world's plus 1 ms a
        # reading (ADK's default is `time.time` as it was at import, before the freeze).
        ticks = itertools.count(1)
        adk_time.set_time_provider(lambda: time.time() + next(ticks) / 1000)
        sessions = SqliteSessionService(db_path=str(env.store.path))
        agent = LlmAgent(name="ops", model=AnthropicLlm(model=env.model, max_tokens=1024),
                         instruction="You run the operations team's jobs.", tools=[long_task])
        runner = Runner(agent=agent, app_name=APP, session_service=sessions)
        session = await sessions.get_session(app_name=APP, user_id=USER,
                                             session_id=env.task_id)
        if session is None:
            session = await sessions.create_session(app_name=APP, user_id=USER,
                                                    session_id=env.task_id)
        message = types.Content(role="user", parts=[types.Part(text=env.task)])
        final = ""
        async for event in runner.run_async(user_id=USER, session_id=session.id,
                                            new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(p.text or "" for p in event.content.parts)
        return final.strip()


def make_agent(env):
    return AdkAgent(env)
