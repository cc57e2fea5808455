"""The six tracer policies satisfy trace.TracerPolicy (the same two methods, the same
parameters)."""
from __future__ import annotations

import inspect

import pytest

from faultsim.inprocess import counting, forking, formats_job, sandbox
from faultsim.real import child
from faultsim.core.trace import TracerPolicy

POLICIES = [sandbox.KillAt, forking.ForkAt, counting._CountAt, formats_job._RecordAt,
            child.RealKill, child.ForkAtEach]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.__name__)
def test_each_policy_has_the_protocols_methods(policy):
    for name in ("after", "before_write"):
        wanted = list(inspect.signature(getattr(TracerPolicy, name)).parameters)
        assert list(inspect.signature(getattr(policy, name)).parameters) == wanted
