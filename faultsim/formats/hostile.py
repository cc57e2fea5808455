"""Hostile checkpoint files: what a crash, a bad disk, a rollback or an attacker can leave
where the agent expects its checkpoint. An agent must refuse each one loudly, leave the
file as it found it, apply no effect and ask the model nothing on the strength of it, and
never quote the file's content (a secret planted in it) in its error.

Fixed cases, derived from one real checkpoint, plus hypothesis-drawn ones (cut at any byte,
junk spliced in anywhere, a field given a value of the wrong type). The checkpoint is the
one the scenario declares (`[checkpoint] files`, else checkpoint.json); the cases are built
from one JSON object holding a tool result, and an agent whose checkpoint is none (JSONL,
SQLite, opaque bytes) is told so (NoHostileCases), not failed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .. import backends
from ..core.draws import seed_only
from ..errors import UsageError
from ..settings.options import FIXED_TIMEOUT

SECRET = "sk-ant-faultsim-canary-7f3a9c2e51d84b06"  # planted; must never be echoed
LARGE = 64 * 1024 * 1024 + 1  # "a very large file": just over 64 MiB


class NoHostileCases(UsageError):
    """The agent's checkpoint is not one the hostile cases can be built from."""


@dataclass(frozen=True)
class HostileFile:
    name: str
    data: bytes


def _planted(doc: dict) -> dict:
    """The document with the secret inside a tool result, where real secrets end up (and
    where the conversation stays valid, so the case tests only its own flaw)."""
    doc = json.loads(json.dumps(doc))
    for message in doc.get("messages") or []:
        for block in message.get("content") if isinstance(message, dict) and isinstance(
                message.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result" \
                    and isinstance(block.get("content"), str):
                block["content"] += f" (api key {SECRET})"
                return doc
    raise ValueError("the sample checkpoint has no tool result to plant the secret in; "
                     "take it after the agent's first completed tool call")


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def fixed_cases(sample: bytes) -> list[HostileFile]:
    """The named cases, from `sample`: a checkpoint the agent itself wrote (JSON object)."""
    doc = _planted(json.loads(sample))
    good = _dump(doc)
    cases = [
        ("future version", _dump({**doc, "version": 999})),
        ("missing version", _dump({k: v for k, v in doc.items() if k != "version"})),
        ("version as text", _dump({**doc, "version": str(doc.get("version"))})),
        ("truncated JSON", good[:len(good) // 2]),
        ("torn tail", good[:-(min(len(good) - 1, 600))] + b"\0" * min(len(good) - 1, 600)),
        ("NUL padding", good + b"\0" * 4096),
        ("NUL only", b"\0" * len(good)),
        ("two records glued", good.rstrip(b"\n") + good),
        ("empty file", b""),
        ("not an object", _dump([doc])),
        ("not UTF-8", good[:len(good) // 2] + b"\xff\xfe" + good[len(good) // 2:]),
    ]
    for key, wrong in (("turns", "3"), ("tokensUsed", -1), ("messages", {}),
                       ("pendingToolUse", "toolu_1"), ("task", 7)):
        if key in doc:
            cases.append((f"wrong type: {key}", _dump({**doc, key: wrong})))
    return [HostileFile(name, data) for name, data in cases]


def large_case(sample: bytes) -> HostileFile:
    """Valid JSON, just over 64 MiB (one huge tool result): to be refused unread."""
    doc = _planted(json.loads(sample))
    data = _dump(doc)
    block = next(b for m in doc["messages"] if isinstance(m.get("content"), list)
                 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    block["content"] += "x" * (LARGE - len(data))
    return HostileFile("very large file", _dump(doc))


def fuzzed_cases(sample: bytes, draw: Callable[[Any], Any]) -> Iterator[HostileFile]:
    """One hypothesis-drawn case (`draw` is `data.draw`): invalid JSON from a cut or a
    splice, or a field given a value of another type."""
    from hypothesis import strategies as st

    doc = _planted(json.loads(sample))
    good = _dump(doc)
    how = draw(st.sampled_from(["cut", "splice", "retype"]))
    if how == "cut":
        at = draw(st.integers(0, len(good) - 2))
        yield HostileFile(f"cut at byte {at}", good[:at])
    elif how == "splice":
        at = draw(st.integers(0, len(good)))
        junk = draw(st.binary(min_size=1, max_size=16).filter(lambda b: b.strip()))
        data = good[:at] + junk + good[at:]
        try:
            json.loads(data)
        except ValueError:
            yield HostileFile(f"{len(junk)} junk bytes at {at}", data)
    else:
        key = draw(st.sampled_from(sorted(k for k in doc if k != "version")))
        expected = type(doc[key])
        value = draw(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3),
                               st.lists(st.integers(), max_size=2),
                               st.dictionaries(st.text(max_size=2), st.integers(),
                                               max_size=2)).filter(
            lambda v: not isinstance(v, expected) and not (
                key == "pendingToolUse" and (v is None or isinstance(v, list)))))
        yield HostileFile(f"{key} = {value!r}", _dump({**doc, key: value}))


@dataclass
class HostileVerdict:
    case: HostileFile
    problems: list[str]  # empty: refused loudly, file untouched, nothing leaked
    error: str | None

    @property
    def ok(self) -> bool:
        return not self.problems


class Attack:
    """One explorer session: a real crash state in mid-run, whose checkpoint file (the
    scenario's `[checkpoint]`) is replaced by each hostile file in turn and resumed by a
    fresh agent."""

    def __init__(self, make_agent: Callable, scenario, *, timeout: float | None =
                 FIXED_TIMEOUT, seed: str = "0") -> None:
        self.make_agent, self.scenario = make_agent, scenario
        self.timeout, self.seed = timeout, seed

    def __enter__(self) -> "Attack":
        import copy

        self._copy = copy.deepcopy
        # the in-process backend's sandbox (faultsim.inprocess.formats_job), through the seam
        self.ex = backends.formats(self.make_agent, self.scenario, seed=self.seed,
                                   timeout=self.timeout).__enter__()
        try:
            self._crash_where_a_checkpoint_is()
        except BaseException:
            self.ex.__exit__(None, None, None)
            raise
        return self

    def _crash_where_a_checkpoint_is(self) -> None:
        from ..killpoints import KillPoint

        spec = self.scenario.checkpoint
        golden = self.ex.golden()  # every service aside: a corpus keeps its own scenario
        saves = [e.index for e in golden.trace if e.kind == "mark.checkpoint.B"]
        # the second save of an agent that marks its saves (the reference agent), else the
        # middle of the run; then the clean run's last checkpoint write, whose file holds
        # the most (a tool result to plant the secret in)
        written = [e.index for e in golden.trace if e.kind in ("fs.write", "fs.rename")
                   and spec.matches(e.subject.split(" from ")[0])]
        first = saves[min(1, len(saves) - 1)] if saves else len(golden.trace) // 2
        for index in dict.fromkeys([first, *written[-1:]]):
            point = KillPoint(index, None, "hostile", "hostile-checkpoint", f"#{index}")
            files, world = self.ex.crash(point)
            for path in sorted(p for p, d in files.items() if spec.matches(p) and d):
                if spec.format_of(path) != "json":
                    continue
                try:
                    _planted(json.loads(files[path]))
                except (ValueError, AttributeError, TypeError):
                    continue  # not one JSON object with a tool result
                self.world, self.files, self.path = world, files, path
                self.sample = files[path]
                return
        raise NoHostileCases(
            f"{self.scenario.path}: no checkpoint ({spec.describe()}) that is one JSON "
            f"object holding a tool result at #{first} or at the last checkpoint write: the "
            "hostile cases are built from one")

    def __exit__(self, *exc) -> None:
        self.ex.__exit__(*exc)

    def __call__(self, case: HostileFile) -> HostileVerdict:
        from ..core.crashmodel import CrashState

        world = self._copy(self.world)
        files = {**self.files, self.path: case.data}
        effects = len(world.ledger.applied())
        asked = len(world.model.requests)
        run = self.ex.resume(world, CrashState.of("process", case.name, files))
        problems = []
        if run.error is None and run.outcome is not None and run.outcome.status == "completed":
            problems.append("accepted it: the run completed")
        applied = len(world.ledger.applied()) - effects
        asked = len(world.model.requests) - asked
        if applied or asked:
            problems.append(f"acted on it: {applied} effect(s) applied, {asked} model "
                            "request(s) sent")
        if run.final.get(self.path) != case.data:
            problems.append(f"{self.path} was overwritten or removed")
        text = " ".join(filter(None, [run.error, run.outcome and run.outcome.final_answer,
                                      run.outcome and run.outcome.escalation]))
        if SECRET in text:
            problems.append("the error text quotes the file's content (the planted secret)")
        return HostileVerdict(case, problems, run.error)


@dataclass
class HostileReport:
    fixed: list[HostileVerdict]  # the named cases and the very large file
    drawn: int  # hypothesis-drawn cases tried
    drawn_failure: HostileVerdict | None  # the smallest drawn case that got through

    @property
    def failures(self) -> list[HostileVerdict]:
        return [v for v in self.fixed if not v.ok] + (
            [self.drawn_failure] if self.drawn_failure else [])


def attack_all(make_agent: Callable, scenario, *, drawn: int = 100, timeout: float | None =
               FIXED_TIMEOUT) -> HostileReport:
    """Every fixed case, the very large file, and `drawn` hypothesis-drawn cases
    (derandomized: the same cases every run; a failure is shrunk)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    with Attack(make_agent, scenario, timeout=timeout) as attack:
        verdicts = [attack(c) for c in fixed_cases(attack.sample) + [large_case(attack.sample)]]
        failing: list[HostileVerdict] = []
        tried = [0]

        # hypothesis refuses max_examples=0 when the test is made: with --hostile 0 it is
        # made for one and not run. (`refused`'s source, decorators included, seeds its
        # derandomized draws: keep it as it is, or the drawn cases change.)
        asked, drawn = drawn, max(drawn, 1)

        @settings(max_examples=drawn, database=None, derandomize=True, deadline=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @given(st.data())
        def refused(data):
            for case in fuzzed_cases(attack.sample, data.draw):
                tried[0] += 1
                verdict = attack(case)
                if not verdict.ok:
                    failing.append(verdict)  # the last one appended is the shrunk one
                    raise AssertionError(case.name)

        if asked > 0:
            try:
                with seed_only():  # the same cases whatever code is loaded (faultsim.core.draws)
                    refused()
            except AssertionError:
                pass
    return HostileReport(verdicts, tried[0], failing[-1] if failing else None)
