"""crewAI PR #4501's case without faultsim or a model: a cyclic flow (a router sends it
round three times) with `@persist` on SQLite, kicked off with a state id, as the agent
does. Prints how many rounds ran: 3 where the fix is (1.10.0 on), 1 on 1.9.3, where an
id in the inputs put the flow in its resuming mode, which then stopped the cycle."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_DISABLE_VERSION_CHECK", "true")

from crewai.flow.flow import Flow, FlowState, listen, or_, router, start  # noqa: E402
from crewai.flow.persistence import SQLiteFlowPersistence, persist  # noqa: E402


class Rounds(FlowState):
    rounds: int = 0


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        @persist(SQLiteFlowPersistence(os.path.join(folder, "flows.db")))
        class Cyclic(Flow[Rounds]):
            @start()
            def begin(self):
                pass

            @listen(or_(begin, "again"))
            def work(self):
                self.state.rounds += 1

            @router(work)
            def route(self):
                return "again" if self.state.rounds < 3 else "stop"

        flow = Cyclic()
        flow.kickoff(inputs={"id": "cyclic-1"})
        return flow.state.rounds


if __name__ == "__main__":
    print(f"rounds: {main()}")
