"""Shards of distinct crash states (`--shard I/N` in the in-process mode): which shard owns
each first crash state, decided alike in every shard from one clean run that kills nothing.

Sharding kill points loses the equal-state memo across shards (a state met at kill points
of two shards is resumed in both). Sharding states keeps it: every shard drives the clean
run and computes every crash state, and resumes (and reports) only the states it owns.

Owners go by class, not by single state, so the sweep's sharing decisions are the same in
a shard as in the whole run. A state is shared from another (`Sweep.known`) only through
three keys: its exact key, its digest with the watched file's content blanked, and its
digest without the watched file. Every state here joins the class of all three
(union-find), so any two states the whole run could let share one resumed run are in one
class, and a class's memo entries are made and read by its own members only: the shard
owning a class meets its members in the same order as the whole run and takes the same
decisions, so the resumed runs of the N shards add up to the whole run's and each state's
verdict comes from the same representative (tests/test_shards.py checks both). A class is
owned by the shard a stable hash of its least key names: the same in every shard, on every
machine. With pairs, `PairSurvey` splits the second crash states the same way.
Standard library, pipeline, sandbox and fingerprints only."""
from __future__ import annotations

import copy
import hashlib

from ..interpose import finality
from ..killpoints import KillPoint
from ..pipeline.incarnation import world_signature
from ..pipeline.shards import Classes, shard_of
from ..pipeline.sweep import absent_digest, by_event, masked_digest
from ..core.trace import Event, Killed, Tracer
from .fingerprints import world_key
from .sandbox import Explorer, crash_states


class _SurveyAt:
    """Tracer policy of the survey: every crash state at each chosen kill point, with the
    keys it could be shared by (computed as the forking executor computes them).
    `observed`: also the key a pair's second crash is composed by from another's run
    (search_after_convergence.Known.key: the state and the observable world)."""

    def __init__(self, ex: Explorer, world, boundary, torn, models,
                 classes: Classes | None = None, observed: bool = False,
                 until: int | None = None) -> None:
        self.ex, self.world, self.boundary, self.torn = ex, world, boundary, torn
        self.models, self.classes, self.keys = models, classes or Classes(), []
        self.observed = observed
        # the run ends after this event (its last surveyed point's; None: runs to its end)
        self.until = until
        self.at: list = []  # (point, its states' exact keys), in the order met

    def _add(self, snapshot: dict, watches: tuple, point: KillPoint | None = None) -> None:
        signature = world_signature(self.world)
        seen = None
        if self.observed:  # hashed: a long text per point, and equal texts hash equal
            seen = hashlib.blake2b(world_key(self.world).encode(), digest_size=16).digest()
        here = []
        for model in self.models:
            for state in crash_states(self.ex, model, snapshot):
                key = ("k", state.digest(), signature)
                self.keys.append((model, key))
                here.append(key)
                self.classes.find(key)
                for watch in dict.fromkeys(watches):
                    masked = masked_digest(state, watch)
                    if masked is not None:
                        self.classes.union(key, ("m", masked, watch, signature))
                    absent = absent_digest(state, watch)
                    if absent is not None:
                        self.classes.union(key, ("k", absent, signature))
                if seen is not None:
                    self.classes.union(key, ("o", state.digest(), seen))
        self.at.append((point, here))

    def after(self, tracer: Tracer, event: Event) -> None:
        point = self.boundary.get(event.index)
        if point is not None:
            self._add(self.ex.interposer.snapshot(), (self.ex.interposer.last_touched,),
                      point)
        if self.until is not None and event.index >= self.until:
            # every surveyed point is behind (a torn write's too): as forking.ForkAt ends
            # a driver after its last chosen point
            self.ex.interposer.kill()
            self.world.sealed = True
            raise finality.killed(Killed("faultsim: past the last surveyed kill point"))

    def before_write(self, tracer: Tracer, write) -> bytes | None:
        for point in self.torn.get(tracer.next_index, ()):
            # the executors watch the file touched before this write (forking.py says
            # why); the file being torn is joined too, so that either way of watching
            # finds its class here (a bigger class is still exact, only less split)
            self._add({**self.ex.interposer.snapshot(), write.path: write.torn(point.offset)},
                      (self.ex.interposer.last_touched, write.path), point)
        return None


def state_owner(ex: Explorer, chosen: list[KillPoint], models: list[str],
                shard: tuple[int, int]):
    """A predicate on a sweep's memo key (state digest, world signature): whether shard
    `shard` = (i, n) owns that crash state; its `counts`, the first crash states the shard
    owns per crash model (what the run says up front). One clean run computes every
    state."""
    i, n = shard
    ex.reset_sandbox()
    world = ex.new_world()
    policy = _SurveyAt(ex, world, *by_event(chosen), models)
    if any(p.index == 0 for p in chosen):
        policy._add(ex.interposer.snapshot(), (ex.interposer.last_touched,))
    ex.incarnation(world, policy)
    owner = {key[1:]: shard_of(policy.classes.find(key), n) for _, key in policy.keys}
    mine = {m: 0 for m in models}
    for model, key in policy.keys:
        mine[model] += owner[key[1:]] == i - 1

    owns = _owned_by(owner, shard)
    owns.counts = mine  # type: ignore[attr-defined]  # this shard's states, per model
    owns.shard = shard  # type: ignore[attr-defined]
    return owns


class PairSurvey:
    """Shards of the pair stage's second crash states (`--shard I/N --crashes 2`), decided
    alike in every shard: the classes of every second crash state of every first crash's
    course, the keys joined as the survey of first crashes joins them, plus the key a
    second crash is composed by from another first crash's run (`observed`).

    Why the N shards' resumed pairs add up to the whole run's, each pair with the whole
    run's verdict. Every shard resumes every first crash state (reporting only its own,
    `Sweep.reports`), so it has what the whole run has when its pair stage starts: the
    same first crashes in the same order, each one's course and where it met the clean run,
    and every single crash's verdict and run. A second crash state's decision (share an
    earlier state's run, compose it, or resume it) then reads only (1) that: the same in
    every shard, and (2) what earlier second crash states left in the pair stage's memos:
    the memo of exact keys (learned under a state's exact key, or the key of a state
    without the watched file), the masked classes, and the runs a later crash is composed
    from (`observed`, by state and observable world). A state writes and reads entries of
    the memos only under keys of its own class (all three keys joined, and the observed
    key), so the owner of a class meets its members in the whole run's order, with the
    same entries before each, and takes the whole run's decisions; the other shards skip
    them, as they skip another shard's first crash states. So every resumed run of the
    whole run is made in exactly one shard, and none other is made.

    The cost (measured in docs/explanation/engine.md, shards): every shard resumes every
    first crash state, runs every first crash's course once more for this survey, and
    drives only the courses with second crash states of its own, to its last own point."""

    def __init__(self, ex: Explorer, observed: bool) -> None:
        self.ex, self.observed = ex, observed
        self.classes = Classes()
        self.courses: list = []  # (model, first crash, [(point, exact keys)])

    def course(self, model: str, first, world, state, points: list[KillPoint],
               stop: bool = False) -> None:
        """Every second crash state at `points`, the kill points of the course resumed
        from `state` after the first crash `first` left `world` (untouched here). `stop`:
        the run ends after the last point's event (representative coverage: `points` are
        the chosen ones, and nothing after the last is surveyed, as the pair stage's
        driver ends there too), else it runs to its end."""
        ex = self.ex

        def start():
            w = copy.deepcopy(world)
            ex.prepare(w, state)
            return w

        at: list = []
        for point in points:
            if point.index == 0:  # before the first event: as the replaying executor does
                w = start()
                w.begin_incarnation()
                policy = _SurveyAt(ex, w, {}, {}, [model], self.classes, self.observed)
                policy._add(ex.interposer.snapshot(), (ex.interposer.last_touched,), point)
                at += policy.at
        until = max((p.index for p in points if p.index > 0), default=None) if stop \
            else None
        if stop and until is None:  # nothing after the first event to survey
            self.courses.append((model, first, at))
            return
        w = start()
        boundary, torn = by_event(points)
        policy = _SurveyAt(ex, w, boundary, torn, [model], self.classes, self.observed,
                           until)
        ex.incarnation(w, policy, timed=False)
        self.courses.append((model, first, at + policy.at))

    def skip(self, model: str, first) -> None:
        """A first crash whose course has no point to survey (none chosen)."""
        self.courses.append((model, first, []))

    def owner(self, shard: tuple[int, int]):
        """(`owns`, a predicate on a second crash state's memo key as `state_owner`'s,
        and `mine`: for each surveyed course, in order, the positions among its points of
        those where shard `shard` owns a state)."""
        i, n = shard
        owner: dict = {}
        mine = []
        for _, _, at in self.courses:
            points = []
            for point, keys in at:
                here = False
                for key in keys:
                    owner[key[1:]] = found = shard_of(self.classes.find(key), n)
                    here = here or found == i - 1
                if here:
                    points.append(point)
            mine.append(points)
        return _owned_by(owner, shard), mine


def _owned_by(owner: dict, shard: tuple[int, int]):
    """A predicate on a memo key: whether shard `shard` = (i, n) owns that state, by the
    survey's `owner` (memo key -> shard index)."""
    i, n = shard

    def owns(key: tuple) -> bool:
        # a state the survey did not meet (an executor that watched another file) goes by
        # its own key: still one owner, only its sharing may be lost
        found = owner.get(key)
        return (found if found is not None else shard_of(("k", *key), n)) == i - 1

    return owns
