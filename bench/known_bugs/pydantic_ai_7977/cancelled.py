"""The report's own reproduction (pydantic-ai #7977), no crash: a run cancelled while its
first and only tool executes, then its `RunCancelled.all_messages()` given a new prompt.
Prints "refused" on 2.37.0 and "resumed" from 2.38.0 (PR #7993), the fix the crash scenario
shows does not reach a killed process: run it with each side's venv python."""
import asyncio

from pydantic_ai import Agent, CancellationToken, RunCancelled
from pydantic_ai.exceptions import UserError
from pydantic_ai.models.test import TestModel

agent = Agent(TestModel(call_tools=["in_flight_tool"]))
started = asyncio.Event()


@agent.tool_plain
async def in_flight_tool() -> None:
    started.set()
    await asyncio.sleep(3600)  # still running when the run is cancelled


async def main() -> str:
    token = CancellationToken()
    run = asyncio.create_task(agent.run("start", cancellation_token=token))
    await started.wait()
    token.cancel()
    try:
        await run
    except RunCancelled as stopped:
        history = stopped.all_messages()
    try:
        await agent.run("next", message_history=history)
    except UserError as refused:
        return f"refused: {refused}"
    return "resumed"


if __name__ == "__main__":
    print(asyncio.run(main()))
