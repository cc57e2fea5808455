"""`faultsim run --ray [ADDRESS]` and `pytest --faultsim-ray`: a sweep's shards run as Ray
tasks, their reports merged into the whole run's (timings aside).

faultsim does not schedule anything here: it splits the run into N shards of crash states
(`--shard I/N`, faultsim.inprocess.sharding), Ray places one task per shard on the cluster,
and the driver joins the shards' JSON reports with `faultsim report merge`'s code
(faultsim.reports.merge). Sound because the shards are what `--shard` already runs: each
judges the states it owns with the whole run's verdicts, and the merge is checked against
the unsharded report (tests/test_ray.py, tests/test_shards.py).

Each task runs its shard as `python -m faultsim run ... --shard I/N --json FILE` in a fresh
process (not in the Ray worker: a sweep forks, and a Ray worker holds threads a fork must
not copy), with the driver's arguments, working directory and environment, so a node needs
faultsim, the agent and the scenario files at the same path (docs/how-to/ray.md). The
report file is a temporary one on the task's node, removed once read.

With no address the run starts a local cluster of its own (`ray.init(num_cpus=...)`) bound
to 127.0.0.1, with a token of its own (nothing written to ~/.ray) and its files in a
temporary folder, and shuts it down before it returns, also on an error or Ctrl-C: no
raylet or GCS process outlives it (tests/test_ray.py checks). Ray is an optional extra
(`faultsim[ray]`); imported only here, only when asked for.

Cut short (Ctrl-C, SIGTERM, a CI limit), the driver cancels the shards still running: each
task sends its `faultsim run` SIGTERM, which writes that shard's partial report (as any
interrupted run does), and hands it back within `SHARD_STOP` seconds. The interrupt then
carries every shard's report, whole or partial, up to the front end (`judged_shards`),
which writes them as one partial report: the shards' own runs side by side, never merged
into a whole run's figures (cli/run.py)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..errors import AgentFinding, HarnessError, UsageError

# how long a cut shard has to write its partial report once sent SIGTERM, and the driver
# to collect them: a sweep answers SIGTERM at its next kill point, a forked crash run's
# worth of time, then writes its reports
SHARD_STOP = 15.0
_SHARDS = "faultsim_shards"  # the attribute an interrupt carries the shards' runs in

# `--ray` alone: a local cluster of this run's own
LOCAL = ""
ADDRESS_EXPECTED = "HOST:PORT, ray://HOST:PORT or auto"
_ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-]+:\d+)$")
# flags of `faultsim run` the driver handles itself, not passed to a shard (flag -> whether
# it takes a value; None: --ray's optional one). --workers sizes the local cluster: a shard
# runs with one
DRIVER_FLAGS = {"--ray": None, "--ray-shards": True, "--json": True, "--html": True,
                "--junit": True, "--summary-md": True, "--baseline": True, "--shard": True,
                "--workers": True, "--annotations": False, "--no-annotations": False}


class RayMissing(UsageError):
    """`--ray` without Ray installed."""


class ShardFailed(HarnessError):
    """A shard's `faultsim run` ended with an error of faultsim's own (its exit 3, or a
    signal); a shard's usage error or agent finding is raised as the same kind here."""


def _failed(code: int, message: str) -> Exception:
    """A shard's error as the driver raises it: the exit code the shard had."""
    return UsageError(message) if code == 2 else AgentFinding(message) if code == 1 \
        else ShardFailed(message)


def check_address(value: str, flag: str = "--ray") -> str | None:
    """The address `--ray [ADDRESS]` names (None: a local cluster), or one line saying
    what is wrong (a scenario file given right after `--ray` is taken as its address)."""
    if value == LOCAL:
        return None
    if not _ADDRESS.match(value):
        raise UsageError(f"{flag} {value}: expected {ADDRESS_EXPECTED} (a local cluster: "
                         f"{flag} with no value, after the scenario files)")
    return value


def shard_args(argv: Sequence[str], ray_value: str | None = None) -> list[str]:
    """`faultsim run`'s arguments (after `run`) without the flags the driver handles
    (--ray and its address, the report files, --baseline, --shard, --annotations)."""
    out: list[str] = []
    args = list(argv)
    n = 0
    while n < len(args):
        arg = args[n]
        name = arg.split("=", 1)[0]
        takes = DRIVER_FLAGS.get(name, "keep")
        n += 1
        if takes == "keep":
            out.append(arg)
        elif "=" in arg or takes is False:
            continue
        elif takes is True:
            n += 1  # its value
        elif ray_value and n < len(args) and args[n] == ray_value:
            n += 1  # --ray ADDRESS
    return out


@dataclass
class ShardRun:
    """One shard as its task ran it."""

    index: int
    of: int
    report: dict
    exit: int
    node: str
    seconds: float


def _run_shard(args: list[str], index: int, of: int, cwd: str,
               env: dict[str, str], scratch: str | None = None) -> dict:
    """The Ray task: shard `index`/`of` in a fresh `faultsim run` process on this node; its
    report in a temporary folder under `scratch` (a local cluster's own folder, removed with
    it, even where a killed worker could not remove its own), else the node's."""
    import platform
    import subprocess

    folder = tempfile.mkdtemp(prefix="faultsim-shard-", dir=scratch)
    out = os.path.join(folder, "report.json")
    started = time.perf_counter()
    try:
        # a fresh process; Ray ends it with its worker (a worker's child processes are
        # killed when it exits, on Linux: ray.shutdown() after Ctrl-C or an error leaves
        # no sweep running, tests/test_ray.py)
        cmd = [sys.executable, "-m", "faultsim", "run", *args, "--shard", f"{index}/{of}",
               "--json", out]
        proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        try:
            err = _waited(proc)
        except KeyboardInterrupt:  # ray.cancel: the driver was cut short
            proc.terminate()  # the shard's partial report, as any run's on SIGTERM
            try:
                _, err = proc.communicate(timeout=SHARD_STOP)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        report = None
        # passed, found failures, or cut short (then its report says partial)
        if proc.returncode in (0, 1, 130, 143) and os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                report = json.load(f)
        return {"report": report, "exit": proc.returncode, "node": platform.node(),
                "seconds": time.perf_counter() - started,
                "stderr": err.strip().splitlines()[-3:]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _waited(proc: Any) -> str:
    """The process's standard error once it ended, waited for a second at a time: Ray
    cancels a task by raising KeyboardInterrupt in it, which a wait without a timeout
    would see only when the shard ended by itself."""
    import subprocess

    while True:
        try:
            return proc.communicate(timeout=1.0)[1]
        except subprocess.TimeoutExpired:
            continue


def _import_ray():
    try:
        import ray
    except ImportError:
        raise RayMissing("--ray: Ray is not installed; install it with "
                         "pip install 'faultsim[ray]'") from None
    return ray


_token: list[str] = []  # this process's local clusters' token


@contextlib.contextmanager
def cluster(address: str | None, num_cpus: int | None) -> Iterator[tuple[Any, str | None]]:
    """Ray, connected to `address`, or to a local cluster this run starts (`num_cpus`,
    default one per core) and shuts down on the way out, whatever happens; and the local
    cluster's temporary folder (None for another cluster), removed last."""
    ray = _import_ray()
    if ray.is_initialized():  # a driver's own session (a test, a notebook): used as is
        yield ray, None
        return
    folder = None
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")}
    try:
        if address is None:
            import secrets

            import logging

            # a token of its own (Ray's default writes one to ~/.ray, and warns that it
            # did: said here instead), no usage report
            logging.getLogger("ray._private.authentication.authentication_token_setup"
                              ).setLevel(logging.ERROR)
            # one per process: Ray's driver keeps the first token it read
            _token.append(os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(16))
            os.environ["RAY_AUTH_TOKEN"] = _token[0]
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
            # short: Ray's sockets live below it (a socket path has at most 107 bytes)
            folder = tempfile.mkdtemp(prefix="fsray-", dir="/tmp" if os.path.isdir("/tmp")
                                      else None)
            with _own_sigterm():
                # Ray starts its workers at niceness 15 (so that they never starve its own
                # daemons on a machine they fill), and a shard's sweep inherits it: on a
                # machine busy with anything else, a local cluster's shards then got a few
                # percent of a core each (a tiny shard 99 s on Ray, 10 s run directly, at
                # a load of 9). A local cluster stands in for --workers, whose processes
                # run at the caller's niceness: so do its workers. A running cluster
                # (ADDRESS) keeps its own setting.
                ray.init(num_cpus=num_cpus or os.cpu_count() or 1,
                         include_dashboard=False, _node_ip_address="127.0.0.1",
                         _temp_dir=folder, log_to_driver=False, configure_logging=False,
                         _system_config={"worker_niceness": 0})
        else:
            with _own_sigterm():
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        yield ray, folder
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[Any]:
    """While the driver waits on Ray: SIGINT and SIGTERM noted, and raised by the
    handlers they had (the CLI's Terminated, the plugin's interrupt, their repeat rules)
    when the returned function is called between two waits. Raised inside Ray's wait, an
    interrupt is made over by Ray: a SystemExit is turned into `SystemExit(1)` (a SIGTERM
    ended the run with exit 1 and no report)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    got: list[int] = []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, handler in before.items():
            if handler is not None:
                signal.signal(s, handler)

    def raised() -> None:
        if not got:
            return
        n = got[0]
        restore()
        handler = before[signal.Signals(n)]
        if callable(handler):
            handler(n, None)
        elif handler == signal.SIG_DFL:  # its default action, now restored
            os.kill(os.getpid(), n)
        got.clear()  # ignored, or absorbed as a repeat: wait on
        for s in before:
            signal.signal(s, lambda n, _frame: got.append(n))

    for s in before:
        signal.signal(s, lambda n, _frame: got.append(n))
    try:
        yield raised
    finally:
        restore()


@contextlib.contextmanager
def _own_sigterm() -> Iterator[None]:
    """The driver's SIGTERM handler as it was before `ray.init`: Ray's core installs a
    handler of its own that logs the signal and ends the process on the spot, so a
    `timeout` or a CI job's limit left no report, partial or not, and no exit 143."""
    import signal
    import threading

    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, before)


def run_shards(args: Sequence[str], *, address: str | None, shards: int | None = None,
               num_cpus: int | None = None, cwd: str | None = None,
               say=None) -> tuple[dict, list[ShardRun]]:
    """`faultsim run ARGS` split into `shards` shards (default: the cluster's CPUs), one
    Ray task each, and the merged report: the whole run's, timings aside."""
    from ..reports.merge import merge

    cwd = cwd or os.getcwd()
    # what a shard's process needs of the driver's: the project's defaults (FAULTSIM_*)
    # and the import path, so the agent and faultsim are found as here
    env = {k: v for k, v in os.environ.items() if k.startswith("FAULTSIM_")}
    # the driver's own import path first (a test file's folder pytest put there), then
    # what the shard's interpreter has: the same agent is imported
    own = [p for p in sys.path if p and os.path.isdir(p)
           and not p.startswith((sys.prefix, sys.base_prefix))]
    env["PYTHONPATH"] = os.pathsep.join(own + [os.environ.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    with cluster(address, num_cpus) as (ray, scratch):
        n = shards or max(1, int(ray.cluster_resources().get("CPU", 1)))
        task = ray.remote(num_cpus=1, max_retries=0)(_run_shard)
        refs = [task.remote(list(args), i, n, cwd, env, scratch) for i in range(1, n + 1)]
        done: list[ShardRun] = []
        try:
            for i, ref in enumerate(refs, 1):
                with _signals_deferred() as interrupted:
                    while not ray.wait([ref], timeout=0.5)[0]:
                        interrupted()
                    interrupted()
                got = ray.get(ref)
                run = ShardRun(i, n, got["report"], got["exit"], got["node"], got["seconds"])
                if run.report is None:
                    why = "; ".join(got["stderr"]) or "no report"
                    raise _failed(run.exit, f"shard {i}/{n} (on {run.node}): faultsim run "
                                  f"exited {run.exit}: {why}")
                if say is not None:
                    say(f"faultsim: shard {i}/{n} on {run.node}: exit {run.exit}, "
                        f"{run.seconds:.1f} s")
                done.append(run)
        except BaseException as exc:
            if isinstance(exc, Exception):  # an error, not an interrupt: no report
                raise
            _collect_cut(ray, refs[len(done):], len(done) + 1, n, done, exc)
            raise
    merged = merge([(f"shard {r.index}/{r.of}", r.report) for r in done])
    return merged, done


def _collect_cut(ray: Any, pending: list, first: int, n: int, done: list[ShardRun],
                 exc: BaseException) -> None:
    """On an interrupt: cancel the shards still running (each then writes its partial
    report), wait for them at most SHARD_STOP seconds and a margin, and put every shard's
    report on the interrupt (`judged_shards`). A second interrupt here is the CLI's to
    absorb (cli/exits.py); one that gets through leaves the shards finished so far."""
    setattr(exc, _SHARDS, (n, done))
    for ref in pending:
        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001 - finished meanwhile: its report is read below
            pass
    ray.wait(pending, num_returns=len(pending), timeout=SHARD_STOP + 5)
    for i, ref in enumerate(pending, first):
        try:
            got = ray.get(ref, timeout=0)
        except Exception:  # noqa: BLE001 - cancelled before it started, or lost
            continue
        if got["report"] is not None:
            done.append(ShardRun(i, n, got["report"], got["exit"], got["node"],
                                 got["seconds"]))


def judged_shards(exc: BaseException) -> tuple[int, list[ShardRun]] | None:
    """The shards' reports an interrupt carries (None: none started): (their number, the
    ones with a report, whole or partial, by index)."""
    return vars(exc).get(_SHARDS)
