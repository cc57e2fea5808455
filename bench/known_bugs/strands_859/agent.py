"""strands #859's agent, as its report writes it: a Strands Agent on Claude with a
FileSessionManager, whose one tool runs a long job. A restarted process builds the agent
again on the same session and sends the request again, as the report's reproduction does
(a service retrying the request it was handling). The job's effect goes to the scenario's
keyed receiver, so a job run twice is recognised; what is judged is whether the session
can resume at all."""
from __future__ import annotations

import os

import faultsim
from strands import Agent, tool
from strands.models.anthropic import AnthropicModel
from strands.session.file_session_manager import FileSessionManager


@faultsim.effect("jobs", key=lambda name: f"job-{name}")
def _submit(name: str) -> dict:
    raise RuntimeError("production job runner not configured in this example")


@tool
def long_task(name: str) -> str:
    """Run the named long job to completion."""
    return str(_submit(name))


class StrandsAgent:
    def __init__(self, env):
        self.env = env

    def run(self) -> str:
        env = self.env
        sessions = os.path.join(str(env.workdir), "sessions")
        manager = FileSessionManager(session_id=env.task_id, storage_dir=sessions)
        model = AnthropicModel(client_args={"api_key": "sk-ant-example"},
                               model_id=env.model, max_tokens=1024)
        agent = Agent(model=model, tools=[long_task], session_manager=manager,
                      callback_handler=None)
        result = agent(env.task)
        return str(result).strip()


def make_agent(env):
    return StrandsAgent(env)
