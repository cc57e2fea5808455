"""An agent whose first run imports a module that draws a uuid4 at import time, as
OpenTelemetry's context does for its keys: the draw happens once per process, in the first
clean run only, and must not shift that run's seeded ids (faultsim.interpose.determinism).
On tests/data/one_charge.toml; otherwise tests/import_time_uuid_agent.py's."""
from __future__ import annotations

import import_time_uuid_agent


class _LazyImport(import_time_uuid_agent._RunNamed):
    def run(self):
        import lazy_ids.keyed  # noqa: F401 - imported lazily, as SDKs import tracing
        return super().run()


def make_agent(env):
    return _LazyImport(env)
