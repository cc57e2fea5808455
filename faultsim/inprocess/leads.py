"""Convergence with an earlier resumed run: a resumed run that reaches a model request in
the state another resumed run of the same sweep was in at its first model request does,
from there, what that run did. It is stopped there and its verdict completed from that
run's known remainder, as faultsim.inprocess.convergence completes one from the clean
run's.

Why it is needed. Many resumed runs never meet the clean run: what they did on resume
stays on disk for good (the reference agent records in `decisions.json` how it settled a
pending tool call; the clean run never writes one). But crash states that differ only in
what no run can observe (whether the kill came before or after a read-only call: the
ledger's history) are resumed one by one, and their runs are in one state from their first
request on (bench/convergence_causes.py: on the 25-step lookups, 75 of the 126 resumed
runs that never meet the clean run meet two others at their first request).

Why the cut is sound. The argument is convergence.py's, with the earlier resumed run (the
lead) in the clean run's place: at the cut the two runs are equal in everything their
future can read, the same parts compared the same way (`_key`: the sandbox with modes and
times, the observable world, the request, open files; `fingerprint`: the agent's memory).
What convergence.py had to show the clean run never reads is equal here instead: both runs
are the same incarnation (`env.incarnation` alike: the lead table is keyed by it) of the
same seed, so their seeded random streams (random, uuid4, tempfile names) are one
sequence, and their positions in it at the cut are compared (`draws`): the same draws
follow. Hence the run would do exactly what the lead did after its first request: the
same calls with the same answers, the same requests, final files, outcome, and first
touches of the files it started from. Its verdict is judged on its own world up to the cut
with the lead's ledger entries and model requests after its first request appended
(renumbered; the incarnation is the same), the lead's final files and outcome, and its own
first touches then the lead's.

What a lead must be. A resumed run that went to its end on its own (not cut), without an
error or a time limit (an exception's text or a hang may not repeat), with no thread of the
agent's left working, and with nothing after its first request that names its process or
was not kept in the lead (a write outside the sandbox, a refused connection or process).
Its memory at its first request must have been readable (no thread alive, no event loop,
nothing `fingerprint` refuses). Not a lead, nor cut against one: a run whose trace is kept
for a further crash (the pair stage's first crashes: their course and the pairs composed
after convergence stay on meetings with the clean run only).

Determinism. Leads are learnt as resumed runs end: in forking mode the parent keeps those
its children send back, and a child forked later starts with them; children running side
by side share theirs on the lead board (board.py) as they go. Which run of equal ones
leads therefore depends on the worker count and on which child got there first; by the argument
above a cut changes nothing a report holds (violations, counterexamples, the first touches
the sweep's memos are keyed on), so the report stays the same. That includes whether the
run's tail can be reused for a later pair (after_convergence.py, `Tail.reusable`): it is
reusable where the run it stands for would be, its own stretch up to the cut blind
(`Cut.blind`: no draw, no read of `env.incarnation`) and the lead's remainder too
(`Lead.blind`, its marks at its first request against its end). The same draws follow at
the cut (compared in the key) and the remainder reads `env.incarnation` as the lead's did,
so that is exactly the long run's blindness. Before, a cut run's tail was never reused,
and which of two equal runs was cut followed the load: README's first command printed
264 resumed pairs on flaky_api and 262 or 263 under load (issue 54); now 254 on any
timing, the count with no lead at all (tests/test_lead_timing.py). Nor does it change how many runs
meet the clean run (`crash_states_converged`): each request is compared with the clean
run's first, and a lead met the clean run at none of its requests (it would have been
cut there, and is no lead), so a run that takes its steps would not have either. How many
runs were cut this way is counted beside it (`ModelRun.met`, `DepthStats.met`), in the JSON
report only in its `shortcuts` block (`leads`, faultsim.reports.shortcuts, which bench/same_json.py
strips): it is how the work was done, and varies with the scheduling.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Start:
    """A resumed run at its first model request: what a lead is found by, and its counts
    there (what is its own history and what its remainder)."""

    key: str  # fingerprints.state_key with the seeded streams' position and the incarnation
    memory: str
    ledger: int
    requests: int
    unrouted: int
    processes: int
    tracking: tuple  # (first_content, first_presence, listed) up to there
    marks: tuple = ()  # (draws, env.incarnation reads) there (Incarnation.began's kind)


@dataclass(frozen=True)
class Lead:
    """A resumed run's remainder after its first model request."""

    key: str
    memory: str
    ledger: tuple  # its ledger entries from there on
    requests: tuple  # its model requests from there on
    final: dict
    outcome: Any
    content: dict  # the files it first touched after that request, and how
    presence: dict
    listed: frozenset
    # the first reason its run was refused a cut against the clean run (None: none met a
    # state of the clean run's); a run cut against it takes it (faultsim.reports.shortcuts)
    why: str | None = None
    # from its first request to its end it drew no random number and never read
    # env.incarnation: a run cut against it is as blind as its own stretch up to the cut
    blind: bool = False


# the leads kept: the latest. Runs meet runs resumed from nearby kill points (the crash
# states of one step), and a larger table weighs on every fork of the driver (its page
# tables) more than it saves. Any subset of leads is sound: a run that finds none goes on.
KEEP = 32


def learn(table: dict, contents: dict, lead: Lead) -> None:
    """Keep `lead` in `table` (the first for its state; the latest KEEP), its final files'
    bytes shared with equal ones of the leads kept (`contents`: one object per content)."""
    if lead.key in table:
        return
    table[lead.key] = replace(lead, final=shared(lead.final, contents))
    while len(table) > KEEP:  # dicts keep insertion order: the oldest goes
        del table[next(iter(table))]
    if len(contents) > 8 * KEEP:  # bytes no kept lead holds any more
        held = {id(v) for x in table.values() for v in x.final.values()}
        for k in [k for k, v in contents.items() if id(v) not in held]:
            del contents[k]


def shared(final: dict, contents: dict) -> dict:
    """`final` (path -> bytes or None) with each content's bytes the one object `contents`
    holds for it: runs that end alike keep one copy of their files."""
    return {k: v if v is None else contents.setdefault(v, v) for k, v in final.items()}


def same_memory(own: str | None, lead: Lead) -> bool:
    """The run's memory is the lead's at its first request (None: unreadable, no cut)."""
    return own is not None and own == lead.memory


def lead_key(key: str, draws: str, incarnation: int) -> str:
    return f"{key}:{draws}:{incarnation}"


def lead_of(start: Start, world: Any, after: tuple, final: dict, inc: Any,
            escapes: list, why: str | None = None) -> Lead | None:
    """The lead a resumed run that ran to its end makes, or None (see the module). `after`:
    its first touches from its first request on (content, presence, listed)."""
    if (inc.outcome is None or inc.error is not None or inc.timed_out or inc.strays
            or escapes or len(world.unrouted) != start.unrouted
            or len(world.processes) != start.processes):
        return None
    return Lead(start.key, start.memory, tuple(world.ledger.entries[start.ledger:]),
                tuple(world.model.requests[start.requests:]), final, inc.outcome,
                dict(after[0]), dict(after[1]), frozenset(after[2]), why,
                bool(start.marks) and inc.ended == start.marks)


def complete(lead: Lead, cut: Any, world: Any, tag: str | None) -> int | None:
    """The cut run's world as it would be at its end: its own calls and requests up to the
    cut, then the lead's, renumbered. Returns its first model position asked."""
    ledger, requests = world.ledger.entries, world.model.requests
    del ledger[cut.ledger:], requests[cut.requests:]
    for e in lead.ledger:
        ledger.append(replace(e, seq=len(ledger) + 1, incarnation=world.incarnation))
    first = cut.first_position
    for q in lead.requests:
        requests.append(replace(q, index=len(requests) + 1, incarnation=world.incarnation))
        if first is None and q.position is not None and q.script == tag:
            first = q.position
    return first


def then(first: tuple, later: tuple) -> tuple[dict, dict, set]:
    """First touches (content, presence, listed): those of `first`, then those of `later`
    for what `first` had not touched."""
    content, presence = dict(first[0]), dict(first[1])
    for k, v in later[0].items():
        content.setdefault(k, v)
    for k, v in later[1].items():
        presence.setdefault(k, v)
    return content, presence, set(first[2]) | set(later[2])


def tracked(lead: Lead, cut: Any) -> tuple[dict, dict, frozenset]:
    """Its own first touches up to the cut, then the lead's after its first request."""
    content, presence, listed = then(cut.tracking, (lead.content, lead.presence, lead.listed))
    return content, presence, frozenset(listed)
