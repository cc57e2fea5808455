"""Files that grow in place (append-only logs, JSONL transcripts): the crash states of both
models are what hardware and the kernel can leave, never less and never more.

- an empty file is a real, readable file in a crash state (in-process and subprocess);
- a power loss tears an unsynced write only within the sectors it changed, and never
  changes a byte that an fsync made sure of (powersafe overwrite by default; the strict
  option lets the one sector shared with synced bytes be damaged);
- properties, drawn by hypothesis over writes, appends, truncates, renames and fsyncs:
  every power state keeps every fsynced byte and name; the process state is exactly the
  page cache at that instant.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultsim import load_scenario
from faultsim.core.crashmodel import SECTOR, power_states, process_state, torn_variants, \
    unsynced_sectors
from faultsim.inprocess.explore import explore
from faultsim.inprocess.fs import DIR, FsInterposer, install
from faultsim.core.trace import Tracer

from conftest import DATA, ROOT, SB, dir_fsync


def power(ip, powersafe=True):
    return power_states(ip.snapshot(), ip.inodes(), ip.durability, powersafe=powersafe)


def append(path, data, *, fsync):
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


# -- torn writes stay inside what was not synced ----------------------------------------

def test_the_issue_example_keeps_every_fsynced_byte(sandbox):
    """A 10,001-byte log, fsynced, then 101 bytes appended: no power state touches the
    10,001 synced bytes (on main, three states zero- or garbage-filled 9,489, 4,881 and 273
    of them)."""
    fs, ip, tracer = sandbox
    ip.restore({})
    synced = bytes(range(256)) * 39 + b"x" * 17  # 10,001 bytes
    with ip:
        append("/sb/log", synced, fsync=True)
        dir_fsync(SB)
        append("/sb/log", b"y" * 101, fsync=False)
    states = power(ip)
    assert len(states) >= 2  # the append landed, or it was lost
    for s in states:
        assert s.as_dict()["log"][:len(synced)] == synced, s.persisted
    # the append shares sector 19 with synced bytes and touches no other: nothing to tear
    assert unsynced_sectors(synced, synced + b"y" * 101) == [19]
    assert not [s for s in states if "torn" in s.persisted]


def test_without_powersafe_overwrite_only_the_shared_sector_is_damaged(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({})
    synced = b"s" * 10_001
    with ip:
        append("/sb/log", synced, fsync=True)
        dir_fsync(SB)
        append("/sb/log", b"y" * 101, fsync=False)
    strict = [s for s in power(ip, powersafe=False) if "torn" in s.persisted]
    assert [s.persisted for s in strict] == [
        "log torn before sector 1/1 of unsynced bytes 9728-10102, zero-filled with the "
        "synced bytes sharing it (no powersafe overwrite)"]
    data = strict[0].as_dict()["log"]
    assert data[:9728] == synced[:9728]  # every sector the append did not share: intact
    assert data[9728:] == b"\0" * (10_102 - 9728)


def test_a_multi_sector_append_is_torn_inside_its_own_sectors(sandbox):
    fs, ip, tracer = sandbox
    ip.restore({})
    synced, added = b"s" * 1000, bytes(range(1, 251)) * 6  # 1,500 bytes: sectors 1..4
    with ip:
        append("/sb/log", synced, fsync=True)
        dir_fsync(SB)
        append("/sb/log", added, fsync=False)
    new = synced + added
    torn = {s.persisted: s.as_dict()["log"] for s in power(ip) if "torn" in s.persisted}
    region = "of unsynced bytes 512-2500"
    assert list(torn) == [f"log torn after sector 1/4 {region}, zero-filled",
                          f"log torn after sector 2/4 {region}, zero-filled",
                          f"log torn after sector 2/4 {region}, garbage-filled",
                          f"log torn after sector 3/4 {region}, zero-filled"]
    for name, data in torn.items():
        k = int(name.split("sector ")[1].split("/")[0])
        cut = (1 + k) * SECTOR  # the region starts at sector 1
        fill = b"\0" if "zero" in name else b"\xa5"
        assert len(data) == len(new)
        assert data[:1000] == synced  # fsynced bytes never change
        assert data[:cut] == new[:cut]
        assert data[cut:] == fill * (len(new) - cut)


def test_a_torn_overwrite_leaves_each_touched_sector_old_new_or_filled(sandbox):
    fs, ip, tracer = sandbox
    old = b"0123456789abcdef" * 256  # 4,096 bytes, 8 sectors, all synced
    ip.restore({"ckpt": old})
    with ip:
        with open("/sb/ckpt", "r+b") as f:  # an in-place overwrite of bytes 600..2600
            f.seek(600)
            f.write(b"N" * 2000)
    new = old[:600] + b"N" * 2000 + old[2600:]
    touched = unsynced_sectors(old, new)
    assert touched == [1, 2, 3, 4, 5]
    variants = torn_variants("ckpt", old, new)
    assert any(name.endswith("the rest as synced") for name, _ in variants)
    for powersafe in (True, False):
        for name, data in torn_variants("ckpt", old, new, powersafe=powersafe):
            assert len(data) == len(new)
            for s in range(len(new) // SECTOR):
                a, b = s * SECTOR, (s + 1) * SECTOR
                if s not in touched:
                    assert data[a:b] == old[a:b], (name, s)  # untouched: never rewritten
                    continue
                sector = data[a:b]
                filled = {bytes([c]) * SECTOR for c in (0, 0xa5)}
                partly = {(old[a:600] if a < 600 else b"") + bytes([c]) * (min(b, 2600) - max(a, 600))
                          + (old[2600:b] if b > 2600 else b"") for c in (0, 0xa5)}
                allowed = {old[a:b], new[a:b]} | (partly if powersafe else filled | partly)
                assert sector in allowed, (name, s)
            if powersafe:
                assert data[:600] == old[:600] and data[2600:] == old[2600:], name


def test_powersafe_overwrite_is_a_scenario_setting(tmp_path):
    base = (DATA / "tiny.toml").read_text()
    assert load_scenario(DATA / "tiny.toml").profile.powersafe_overwrite is True
    path = tmp_path / "strict.toml"
    path.write_text(base.replace("[services.payments]",
                                 "[fault_profile]\npowersafe_overwrite = false\n\n"
                                 "[services.payments]"))
    assert load_scenario(path).profile.powersafe_overwrite is False
    path.write_text(base.replace("[services.payments]",
                                 "[fault_profile]\npowersafe_overwrite = \"no\"\n\n"
                                 "[services.payments]"))
    with pytest.raises(Exception) as err:
        load_scenario(path)
    assert "fault_profile.powersafe_overwrite" in str(err.value)
    assert "true or false" in str(err.value)


# -- properties of the crash model -------------------------------------------------------

NAMES = ("a", "d/c")


@dataclass
class Model:
    """What the disk must keep, tracked beside the operations: per file identity, the
    synced bytes and which of them an unsynced write or truncate has touched since; per
    directory, the names its last fsync made sure of."""

    cache: dict = field(default_factory=dict)  # path -> current bytes (the page cache)
    ident: dict = field(default_factory=dict)  # path -> identity
    synced: dict = field(default_factory=dict)  # identity -> bytes at its last fsync
    touched: dict = field(default_factory=dict)  # identity -> offsets touched since then
    names: dict = field(default_factory=lambda: {".": {}, "d": {}})  # dir -> synced names
    next_id: int = 0

    def write(self, path, offset, data, *, truncate=False):
        if path not in self.cache:
            self.cache[path], self.ident[path] = b"", self.next_id
            self.next_id += 1
        old, ino = self.cache[path], self.ident[path]
        old = old if not truncate else b""
        if offset > len(old):
            offset = len(old)
        new = old[:offset] + data + old[offset + len(data):]
        hit = self.touched.setdefault(ino, set())
        hit.update(range(offset, offset + len(data)))
        if truncate:
            hit.update(range(0, len(self.cache[path]) + 1))
        self.cache[path] = new

    def truncate(self, path, size):
        ino = self.ident[path]
        old = self.cache[path]
        self.touched.setdefault(ino, set()).update(range(min(size, len(old)), max(size, len(old)) + 1))
        self.cache[path] = old[:size] + b"\0" * max(0, size - len(old))

    def fsync(self, path):
        ino = self.ident[path]
        self.synced[ino] = self.cache[path]
        self.touched[ino] = set()

    def fsync_dir(self, d):
        prefix = "" if d == "." else d + "/"
        self.names[d] = {p[len(prefix):]: self.ident[p] for p in self.cache
                         if p.startswith(prefix) and "/" not in p[len(prefix):]}

    def rename(self, src, dst):
        self.cache[dst] = self.cache.pop(src)
        self.ident[dst] = self.ident.pop(src)

    def stable_names(self):
        """Paths whose name is synced and unchanged since: they must survive."""
        out = {}
        for d, names in self.names.items():
            prefix = "" if d == "." else d + "/"
            if d != "." and "d" not in self.names["."]:
                continue  # the directory's own name was never synced
            for name, ino in names.items():
                if self.ident.get(prefix + name) == ino:
                    out[prefix + name] = ino
        return out


ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.integers(0, 3000),
              st.integers(1, 2000), st.integers(1, 255)),
    st.tuples(st.just("append"), st.sampled_from(NAMES), st.integers(1, 2000),
              st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.sampled_from(NAMES), st.integers(0, 2500)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("fsync"), st.sampled_from(NAMES)),
    st.tuples(st.just("fsync_dir"), st.sampled_from((".", "d"))),
), max_size=14)


class Disk:
    """A pyfakefs file system driven through its own `os` and `open`, without patching the
    interpreter: the property test builds one and keeps pytest's real files out of it."""

    def __init__(self):
        from pyfakefs.fake_filesystem import FakeFilesystem
        from pyfakefs.fake_open import FakeFileOpen
        from pyfakefs.fake_os import FakeOsModule

        install()
        self.fs = FakeFilesystem()
        self.fs.create_dir(SB)
        self.os, self.open = FakeOsModule(self.fs), FakeFileOpen(self.fs)

    def fsync_path(self, path):
        fd = self.os.open(path, os.O_RDONLY)
        self.os.fsync(fd)
        self.os.close(fd)


def apply(op, model, disk):
    """Do `op` on the fake disk (under the interposer) and in the model alike."""
    kind, path = op[0], op[1]
    real = f"{SB}/{path}" if path != "." else SB
    exists = path in model.cache
    if kind == "write":
        _, _, offset, size, byte = op
        data = bytes([byte]) * size
        with disk.open(real, "r+b" if exists else "wb") as f:
            f.seek(min(offset, len(model.cache.get(path, b""))))
            f.write(data)
        model.write(path, offset, data)
    elif kind == "append":
        _, _, size, byte = op
        with disk.open(real, "ab") as f:
            f.write(bytes([byte]) * size)
        model.write(path, len(model.cache.get(path, b"")), bytes([byte]) * size)
    elif kind == "truncate" and exists:
        disk.os.truncate(real, op[2])
        model.truncate(path, op[2])
    elif kind == "rename" and exists and op[2] != path:
        disk.os.replace(real, f"{SB}/{op[2]}")
        model.rename(path, op[2])
    elif kind == "fsync" and exists:
        disk.fsync_path(real)
        model.fsync(path)
    elif kind == "fsync_dir":
        disk.fsync_path(real)
        model.fsync_dir(path)


@pytest.fixture(scope="module")
def disk():
    return Disk()


def _fresh(disk):
    tracer = Tracer()
    ip = FsInterposer(disk.fs, SB, tracer)
    ip.restore({"d": DIR})
    model = Model()
    model.names = {".": {"d": -1}, "d": {}}  # the starting tree is durable
    return ip, model


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, powersafe=st.booleans())
def test_every_power_state_keeps_every_fsynced_byte_and_name(disk, ops, powersafe):
    ip, model = _fresh(disk)
    with ip:
        for op in ops:
            apply(op, model, disk)
        snapshot = ip.snapshot()
        states = power(ip, powersafe)
    # the process state is exactly the page cache at this instant
    [proc] = process_state(snapshot)
    assert {p: d for p, d in proc.as_dict().items() if d is not DIR} == model.cache
    assert states[0].as_dict() == proc.as_dict()
    stable = model.stable_names()
    stable["d"] = -1
    for state in states:
        files = state.as_dict()
        for path, ino in stable.items():
            assert path in files, (state.persisted, path, "a synced name was lost")
            if ino == -1:
                continue
            synced = model.synced.get(ino)
            if synced is None:
                continue
            data = files[path]
            for i in range(len(synced)):
                if i in model.touched.get(ino, ()):
                    continue
                # a torn strict state may damage the one sector an unsynced write shares
                if not powersafe and "no powersafe" in state.persisted or not powersafe and \
                        "torn" in state.persisted and _shares_sector(model, ino, i):
                    continue
                assert i < len(data) and data[i] == synced[i], \
                    (state.persisted, path, i, "an fsynced byte changed")


def _shares_sector(model, ino, i):
    s = i // SECTOR
    return any(j // SECTOR == s for j in model.touched.get(ino, ()))


# -- empty files, read back in a resumed run -----------------------------------------------

class AppendsThenReopens:
    """Creates its log empty, then appends; on resume it reopens the log, reads it, appends
    to it and truncates it, and says so in its final answer (the fake's script ends with
    the expected answer, so a failure to do any of it fails the run)."""

    def __init__(self, env):
        self.env = env
        self.path = os.path.join(str(env.workdir), "log.jsonl")

    def run(self):
        os.makedirs(self.env.workdir, exist_ok=True)
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                data = f.read()  # on main: FakeLargeFileIoException for an empty file
            with open(self.path, "ab") as f:
                f.write(b'{"resumed": true}\n')
            with open(self.path, "r+b") as f:
                f.truncate(len(data))
            assert open(self.path, "rb").read() == data
        else:
            open(self.path, "ab").close()  # created empty: a kill may land right here
        with open(self.path, "ab") as f:
            f.write(b'{"step": 1}\n')
            f.flush()
            os.fsync(f.fileno())
        self.env.client.messages.create(model=self.env.model, max_tokens=64,
                                        messages=[{"role": "user", "content": self.env.task}])
        return "done"


def appends_then_reopens(env):
    return AppendsThenReopens(env)


def _log_scenario(tmp_path):
    path = tmp_path / "log.toml"
    path.write_text('task = "Log a step."\nexpected_final_answer = "done"\n\n'
                    '[[turns]]\nfinal = "done"\n')
    return load_scenario(path)


def _empty_log_point(kp):
    return kp.category == "start" and "fs.create log.jsonl" in kp.describe()


@pytest.mark.parametrize("model", ["process", "power"])
def test_an_empty_file_is_read_appended_and_truncated_after_a_resume(tmp_path, model):
    scenario = _log_scenario(tmp_path)
    report = explore(appends_then_reopens, scenario, crash_model=model, crashes=1,
                     only=_empty_log_point, workers=0)
    [run] = report.runs
    assert len(run.explored) == 1  # the kill landed right after the create
    assert run.verdicts and all(v.ok for v in run.verdicts), report.counterexamples()
    assert run.ok, report.counterexamples()


def test_an_empty_file_is_read_back_in_subprocess_mode(tmp_path):
    from faultsim.real.explore import explore_subprocess

    scenario = _log_scenario(tmp_path)
    stats: dict = {}
    report = explore_subprocess("test_growing_files:appends_then_reopens", scenario,
                                only=_empty_log_point, stats=stats)
    [run] = report.runs
    assert len(run.explored) == 1 and stats["kills_landed"] == 1
    assert run.verdicts
    assert run.ok, report.counterexamples()


# -- the bundled JSONL transcript example ---------------------------------------------------

EXAMPLE = ROOT / "examples" / "jsonl_transcript"


def _example(attr):
    from faultsim.settings.loading import load_factory

    return load_factory(f"{EXAMPLE / 'agent.py'}:{attr}")


def test_the_jsonl_transcript_example_is_clean_under_both_models_and_two_crashes():
    scenario = load_scenario(EXAMPLE / "scenario.toml")
    report = explore(_example("make_agent"), scenario, crash_model="all", crashes=2)
    assert [r.crash_model for r in report.runs] == ["process", "power"]
    for run in report.runs:
        assert len(run.explored) == len(run.kill_points) > 0
        assert run.depth(2).explored > 0  # second crashes were explored
        assert run.ok, report.counterexamples()
    power = report.runs[1]
    # torn tails of the transcript were among the states the agent survived
    assert any("transcript.jsonl torn after sector" in v.persisted for v in power.verdicts)


def test_appending_after_a_torn_tail_is_caught():
    scenario = load_scenario(EXAMPLE / "scenario.toml")
    report = explore(_example("make_agent_keeps_torn_tail"), scenario, crash_model="all",
                     crashes=2)
    for run in report.runs:
        assert not run.ok, run.crash_model
        assert any("JSONDecodeError" in v.explanation or v.invariant != "completes_or_escalates"
                   for f in run.failures for v in f.violations)


def test_an_empty_file_grown_by_truncate_reads_zeros(sandbox):
    """Found by the property above: pyfakefs keeps an empty file's bytes empty when
    `truncate` grows it; the kernel reads zeros there, and so must the crash state."""
    fs, ip, tracer = sandbox
    ip.restore({"log": b""})
    with ip:
        with open("/sb/log", "r+b") as f:
            f.truncate(3)
        os.truncate("/sb/log", 0)
        os.truncate("/sb/log", 2)
        assert open("/sb/log", "rb").read() == b"\0\0"
    [state] = process_state(ip.snapshot())
    assert state.as_dict() == {"log": b"\0\0"}
    assert [e.kind for e in tracer.events] == ["fs.truncate"] * 3
