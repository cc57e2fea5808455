"""Deprecated: moved to `faultsim.real.redis_server` (it starts a real process, the
subprocess backend's business, not the simulated world's). This alias keeps old imports
working and warns; no module of the world imports it, nor anything under `real/`."""
import importlib
import sys
import warnings

warnings.warn("faultsim.world.redis_server moved to faultsim.real.redis_server",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("faultsim.real.redis_server")
