"""Kill points: every boundary between two events of the golden trace, and torn points
inside each write. Ids are stable and readable: `k41-between-A-and-tool-checkpoint.A`."""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from .core.trace import Event

if TYPE_CHECKING:
    from .core.checkpoints import CheckpointSpec

SECTOR = 512

# Phases set by the agent's marks, the model and the world; a boundary takes the phase of
# the last such event before it. An adapter adds its own marks' phases where it defines
# them (`register_phases`, when it is imported): this table names no adapter.
_PHASES = {
    "model.response": "after-model-response",
    "mark.checkpoint.A": "between-A-and-tool",
    "mark.tool.start": "in-tool",
    "effect.applied": "after-effect",
    "mark.tool.end": "after-tool-before-B",
    "mark.checkpoint.B": "after-B",
    "mark.run.completed": "after-completion",
    "mark.run.escalated": "after-escalation",
}
_CORE = frozenset(_PHASES)


def register_phases(phases: Mapping[str, str]) -> None:
    """Declare the phase each of an adapter's marks starts (event kind -> category, e.g.
    its checkpointer's put -> "after-checkpoint-put"), hypothesis-style: called by the
    adapter's module when it is imported, which is before any trace of its agent is read
    (its factory imports it). A phase is one of `CATEGORIES`; a mark keeps the phase it
    was first given."""
    for mark, phase in phases.items():
        if phase not in CATEGORIES:
            raise ValueError(f"{mark}: phase {phase!r} is not a kill-point category")
        if _PHASES.setdefault(mark, phase) != phase:
            raise ValueError(f"{mark}: already the start of phase {_PHASES[mark]!r}, "
                             f"not {phase!r}")


def registered_phases() -> dict[str, str]:
    """The phases adapters declared in this process: a fork server of the subprocess mode
    sends them with its reports (the process that reads the traces never imported the
    agent, nor its adapter)."""
    return {m: p for m, p in _PHASES.items() if m not in _CORE}


_COMMITS = ("sqlite.commit", "redis.exec")
CATEGORIES = ("start", "after-model-response", "checkpoint-mid-write", "checkpoint-rename",
              "checkpoint-commit",
              "between-A-and-tool", "in-tool", "after-effect", "after-tool-before-B",
              "after-B", "mid-write", "after-completion", "after-escalation",
              "after-checkpoint-read", "after-checkpoint-put", "after-put-writes", "after-tool",
              "mid-stream")
REQUIRED_ON_REFERENCE = ("checkpoint-mid-write", "checkpoint-rename", "after-model-response",
                         "between-A-and-tool", "after-effect", "after-tool-before-B", "after-B")


@dataclass(frozen=True)
class KillPoint:
    index: int  # kill after event `index` (0: before the first event) ...
    offset: int | None  # ... or inside event `index`, after `offset` bytes of its write
    category: str
    id: str
    where: str  # the event it follows or tears, in words

    @property
    def torn(self) -> bool:
        return self.offset is not None

    def describe(self) -> str:
        how = f"inside {self.where}, after {self.offset} bytes" if self.torn \
            else f"after {self.where}"
        return f"{self.id} ({self.category}): {how}"


# Torn cuts per write (issue 51): every one up to `TORN_ALL_UP_TO` bytes written, a bounded
# set of representatives beyond. `[fault_profile] torn_cuts = "all"` asks for every cut.
TORN_CUTS = ("bounded", "all")
TORN_ALL_UP_TO = 128 * SECTOR  # 64 KiB: every bundled scenario's writes (the 200-step
#   task's checkpoint peaks at 59,833 bytes) keep every cut, and their kill-point counts
TORN_EDGE = 8  # sector boundaries kept at each end of a larger write
TORN_POWERS = range(13, 41)  # 8 KiB .. 1 TiB: power-of-two offsets kept in between
TORN_MOST = 3 + 2 * TORN_EDGE + len(TORN_POWERS)  # 47: no write gets more cuts


def torn_offsets(length: int, cuts: str = "bounded") -> list[int]:
    """Where a kill inside a write of `length` bytes cuts it: after 1 byte, half, all but
    one byte, and each 512-byte boundary; for a write over `TORN_ALL_UP_TO` bytes (unless
    `cuts` is "all") a bounded set of representatives of them instead, at most `TORN_MOST`:

    - the three cuts above (`first`, `half`, `last`): a reader that parses the file meets
      one byte of it, some of it, and all but its end: "nothing", "some", "all but the
      end", the three answers a prefix can give a parser that needs the whole document;
    - the first and last `TORN_EDGE` sector boundaries: a header torn after its first
      sectors, a trailer (an index, a checksum, a closing bracket) missing its end;
    - the sector boundaries at powers of two (8 KiB, 16 KiB, ... 1 TiB): where a writer
      that flushes a power-of-two buffer (io.DEFAULT_BUFFER_SIZE, 64 KiB, 1 MiB chunks)
      stops between two flushes, so where a real SIGKILL in its write loop leaves it.

    Sound for what a torn write can show a reader that needs its whole content: any
    prefix fails that reader as the first, half or last one does, so a write that is not
    atomic (no temp file and rename) is caught by those cuts, and one that is (the torn
    temp file never read) passes at all of them. Not covered: a reader whose answer depends
    on exactly where in the middle the cut falls (a record format that parses a prefix
    ending at a record boundary as a shorter, valid file): the skipped sector boundaries
    between the edges and the powers of two. Even every cut covers that only at sector
    boundaries; "all" asks for them (`torn_bounded` says which writes were bounded)."""
    if length < 2:
        return []
    ends = {1, length // 2, length - 1}
    if cuts == "all" or length <= TORN_ALL_UP_TO:
        points = ends | set(range(SECTOR, length, SECTOR))
    else:
        last = (length - 1) // SECTOR  # the last sector boundary inside the write
        points = ends | {k * SECTOR for k in range(1, TORN_EDGE + 1)} \
            | {k * SECTOR for k in range(last - TORN_EDGE + 1, last + 1)} \
            | {1 << p for p in TORN_POWERS if 1 << p < length}
    return sorted(p for p in points if 0 < p < length)


def every_cut(length: int) -> int:
    """How many cuts `torn_offsets(length, "all")` makes, without making them."""
    if length < 2:
        return 0
    ends = {o for o in (1, length // 2, length - 1) if 0 < o < length and o % SECTOR}
    return (length - 1) // SECTOR + len(ends)


def cut_kind(length: int, offset: int) -> str:
    """What kind of cut `offset` is in a write of `length` bytes: `first` (one byte
    landed), `half`, `last` (all but one byte), or `sector` (a sector boundary in between,
    of which a larger write has more). Two versions of a write torn the same way differ in
    offset as soon as one writes more bytes (faultsim compare aligns them by kind)."""
    if offset == 1:
        return "first"
    if offset == length - 1:
        return "last"
    if offset == length // 2:
        return "half"
    return "sector"


def _grown(event: Event) -> tuple[int, int] | None:
    """(old length, new length) of a write event (`detail` "OLD->NEW DIGEST", as every
    backend writes it); None where it says otherwise."""
    old, _, new = event.detail.partition(" ")[0].partition("->")
    try:
        return int(old), int(new)
    except ValueError:
        return None


def write_runs(trace: Sequence[Event]) -> list[list[int]]:
    """The writes of `trace` in series, each a list of 0-based positions: a write, and the
    writes right after it (no event between) to the same file that each append exactly
    where the one before ended (its old length is the last one's new length, its written
    region starts there). A buffered writer's `json.dump` or loop of `f.write` reaches the
    file as such a series (a flush per buffer), as does a loop of `os.write`. A write not
    in such a series is a series of one."""
    runs: list[list[int]] = []
    for i, event in enumerate(trace):
        if event.kind != "fs.write":
            continue
        if runs and runs[-1][-1] == i - 1 and trace[i - 1].subject == event.subject:
            before, grown = _grown(trace[i - 1]), _grown(event)
            if before is not None and grown is not None and before[1] == grown[0] \
                    and event.size == grown[1] - grown[0] > 0:
                runs[-1].append(i)
                continue
        runs.append([i])
    return runs


def run_cuts(trace: Sequence[Event], run: Sequence[int], cuts: str = "bounded"
             ) -> tuple[dict[int, list[int]], set[int]] | None:
    """Where kills inside the series of writes `run` (`write_runs`) land, when its cuts are
    bounded as one write's: ({position: its torn offsets}, {positions whose boundary after
    is kept}); None when every cut of every write is kept (the series wrote up to
    `TORN_ALL_UP_TO` bytes, or `cuts` is "all"), and so is every boundary.

    A kill inside the series leaves the file's first writes whole, the next one cut and the
    rest unwritten: the bytes written so far, a prefix of the series' region (a kill
    between two of its writes too, those are separate write() calls; the phase is the
    same, no other event lies between). So the series has the cuts of one write of its
    total length, and keeps `torn_offsets`' representatives of them: each one a torn point
    of the write it falls in, or the boundary between two writes where it falls there.
    Sound as `torn_offsets` is (a reader that needs the whole file fails at any prefix as
    it does at the first, half or last one), and the boundary after the last write (the
    series landed whole) is always kept. Not covered, as `torn_offsets` says, a reader
    whose answer depends on where the cut falls, and here the boundaries between the
    series' writes are among the cuts skipped: a JSONL file written one `os.write` per line
    reads as a shorter, valid file at each line's end, and only some of them are kept.

    The bound in work and memory: a series over 64 KiB has at most `TORN_MOST` kill points
    inside it (47; a 50 MB json.dump's 6,528 flushes: 32), whatever the number of its
    writes, so its crash runs and resumes are those of one write. Each torn state kept
    holds its own prefix of the file (its flush's old and new bytes, `crashmodel.TornState`),
    so the states of a series hold at most `TORN_MOST` copies of the file, O(file), never
    O(writes x file); measured, 12 to 13 live bytes per byte written in all (tracemalloc,
    4, 8 and 50 MB dumps, two workers; the 50 MB one swept in about 15 s)."""
    sizes = [trace[i].size for i in run]
    total = sum(sizes)
    if cuts == "all" or total <= TORN_ALL_UP_TO:
        return None
    torn: dict[int, list[int]] = {}
    after = {run[-1]}
    k, start = 0, 0  # the write a cut falls in, and where it starts in the series
    for cut in torn_offsets(total, cuts):
        while cut >= start + sizes[k]:
            start += sizes[k]
            k += 1
        if cut == start:  # between write k-1 and write k: the boundary after k-1
            after.add(run[k - 1])
        else:
            torn.setdefault(run[k], []).append(cut - start)
    return torn, after


def torn_bounded(trace: Sequence[Event], cuts: str = "bounded") -> list[dict]:
    """The writes of `trace` whose cuts were bounded: `{"file", "bytes", "cuts", "of",
    "writes"}` each (its written bytes, the kill points kept inside it, how many every cut
    would be, and the writes it was made of: more than one for a series cut as one,
    `run_cuts`), in trace order: what a run's plan and report say, so no skipped cut goes
    unsaid."""
    out = []
    for run in write_runs(trace):
        bounded = run_cuts(trace, run, cuts)
        if bounded is not None:
            torn, after = bounded
            out.append({"file": trace[run[0]].subject,
                        "bytes": sum(trace[i].size for i in run),
                        "cuts": sum(map(len, torn.values())) + len(after) - 1,
                        "of": sum(every_cut(trace[i].size) for i in run) + len(run) - 1,
                        "writes": len(run)})
    return out


def torn_bounded_line(bounded: Sequence[dict]) -> str | None:
    """The console line for `torn_bounded`'s writes (None: nothing bounded)."""
    if not bounded:
        return None
    kept, of = sum(b["cuts"] for b in bounded), sum(b["of"] for b in bounded)
    largest = max(bounded, key=lambda b: b["bytes"])
    writes = f"{len(bounded)} write{'s' if len(bounded) != 1 else ''}"
    series = sum(1 for b in bounded if b["writes"] > 1)  # write_runs: cut as one write
    if series:
        writes += " (a series of consecutive writes extending one file, cut as one)" \
            if len(bounded) == 1 else (f" ({series} of them series of consecutive writes "
                                       "extending one file, each cut as one)")
    made = f" in {largest['writes']} writes" if largest["writes"] > 1 else ""
    return (f"  torn cuts     {writes} over {TORN_ALL_UP_TO // 1024} KiB cut at {kept} "
            f"representative offsets of {of} (the largest: {largest['file']}, "
            f"{largest['bytes']} bytes{made}, {largest['cuts']} of {largest['of']}); "
            '[fault_profile] torn_cuts = "all" tries every one')


def _checkpoint_test(trace: Sequence[Event], checkpoint: "CheckpointSpec | None"):
    """Which written paths count as checkpoint writes. Undeclared: today's names (a file
    whose name starts with `checkpoint`, its temp file included). Declared: the files the
    scenario names, and any file the run renames onto one of them (its temp file, however
    the agent names it)."""
    if checkpoint is None or not checkpoint.declared:
        return lambda path: posixpath.basename(path).startswith("checkpoint")
    staged = {e.detail[5:] for e in trace
              if e.kind == "fs.rename" and e.detail.startswith("from ")
              and checkpoint.matches(e.subject)}
    return lambda path: path in staged or checkpoint.matches(path)


def label(event: Event) -> str:
    """What a kill-point id names an event by, without its index or occurrence (a file's
    name, a service call, a mark, the model): also part of a crash state's identity
    (faultsim.reports.identity)."""
    if event.kind.startswith("fs."):
        name = posixpath.basename(event.subject)
    elif event.kind.startswith("effect."):
        name = event.subject
    elif event.kind.startswith("mark."):
        name = event.kind[5:] + (f"-{event.subject}" if event.subject else "")
    elif event.kind == "model.response":
        name = f"model@{event.subject}"
    elif event.kind == "model.stream":
        name = "stream"
    else:
        name = event.kind
    return name


def _subject(event: Event, counts: dict[str, int]) -> str:
    name = label(event)
    counts[name] = counts.get(name, 0) + 1
    return re.sub(r"[^A-Za-z0-9_.@:#-]+", "_", f"{name}#{counts[name]}")


def kill_points(trace: Sequence[Event], checkpoint: "CheckpointSpec | None" = None,
                torn_cuts: str = "bounded") -> list[KillPoint]:
    """Every kill point of `trace`; `checkpoint` (the scenario's declaration) says which
    writes and renames are checkpoint saves, `torn_cuts` (the scenario's) whether a large
    write's cuts are bounded (`torn_offsets`), and a long series of writes extending one
    file's cut as one write's (`run_cuts`)."""
    _is_checkpoint = _checkpoint_test(trace, checkpoint)
    # the series bounded as one write: where their kills land, by position in the trace
    torn_at: dict[int, list[int]] = {}
    dropped: set[int] = set()  # writes in a series whose boundary after is not kept
    for run in write_runs(trace):
        bounded = run_cuts(trace, run, torn_cuts)
        if bounded is not None:
            torn_at.update((i, []) for i in run)
            torn_at.update(bounded[0])
            dropped.update(i for i in run if i not in bounded[1])
    points = [KillPoint(0, None, "start", "k0-start", "nothing (before the first event)")]
    phase = "start"
    counts: dict[str, int] = {}
    for i, event in enumerate(trace, start=1):
        subject = _subject(event, counts)
        if event.kind == "fs.write":
            cat = "checkpoint-mid-write" if _is_checkpoint(event.subject) else "mid-write"
            offsets = torn_at.get(i - 1)
            for off in torn_offsets(event.size, torn_cuts) if offsets is None else offsets:
                points.append(KillPoint(i, off, cat, f"k{i}.{off}-{cat}-{subject}@{off}",
                                        event.describe()))
        if event.kind in _PHASES and (event.kind != "model.response"
                                      or event.detail.startswith("200")):
            phase = _PHASES[event.kind]
        if i - 1 in dropped:
            continue
        nxt = trace[i] if i < len(trace) else None
        cat = phase
        if event.kind == "model.stream":
            cat = "mid-stream"  # a streamed answer read in part (the phase goes on after)
        elif nxt is not None and nxt.kind == "fs.rename" and _is_checkpoint(nxt.subject):
            cat = "checkpoint-rename"
        elif nxt is not None and nxt.kind in _COMMITS:
            cat = "checkpoint-commit"  # a database save written, its commit not yet sent
        points.append(KillPoint(i, None, cat, f"k{i}-{cat}-{subject}", event.describe()))
    return points


def categories(points: Sequence[KillPoint]) -> dict[str, int]:
    out = {c: 0 for c in CATEGORIES}
    for p in points:
        out[p.category] = out.get(p.category, 0) + 1
    return out
