"""Pytest fixtures for a real Redis: one `redis-server` per session (per xdist worker).

Without the binary the Redis tests skip, so that a laptop without it still runs the rest;
CI sets FAULTSIM_REQUIRE_REDIS=1 so that a missing server fails instead of silently
skipping the tests that need it.
"""
from __future__ import annotations

import os

import pytest

from faultsim.real.redis_server import RedisServer, RedisUnavailable

MISSING = "redis-server not installed: apt-get install redis-server (CI installs it)"


@pytest.fixture(scope="session")
def redis_server():
    try:
        server = RedisServer().start()
    except RedisUnavailable:
        if os.environ.get("FAULTSIM_REQUIRE_REDIS") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_db(redis_server):
    """A client on db 0, emptied first."""
    client = redis_server.client(db=0)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()
