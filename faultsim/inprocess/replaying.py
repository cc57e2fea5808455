"""The plain executor: for each kill point, run the prefix again, kill, resume, judge; a
point whose crash run misses it twice is that point's finding (`pipeline.unjudged`)."""
from __future__ import annotations

import copy
from typing import Callable

from ..killpoints import KillPoint
from ..pipeline.incarnation import world_signature
from ..pipeline import unjudged
from ..pipeline.sweep import Sweep
from ..pipeline.unjudged import twice
from ..world import World
from .sandbox import Explorer, resume_and_judge


def sweep_replaying(ex: Explorer, sweep: Sweep, chosen: list[KillPoint], models: list[str],
                    progress, start: Callable[[], World] | None = None) -> None:
    """The plain executor: for each kill point, run the prefix again, kill, resume."""
    for n, point in enumerate(chosen):
        for model in models:
            # a crash run that misses its point is tried once more; twice: the point's
            # finding (`kill_point_judged`), and the sweep goes on
            crashed, why = twice(lambda: ex.crash(point, model, start))
            if crashed is None:
                unjudged.record(sweep, model, point, why)
                continue
            world, states, after_kill = crashed.world, crashed.states, crashed.after_kill
            if start is None and point.index > 0:  # a first crash's kill, read or not
                sweep.unwinds[point.id] = crashed.loud  # (as the forking executor's, ForkAt)
            signature, watch = world_signature(world), ex.interposer.last_touched
            for i, state in enumerate(states):
                if not sweep.mine(state, signature, model, point, i):
                    continue  # another shard's state
                known = sweep.known(state, signature, watch)
                key, result = known.key, known.result
                composed = None if result is not None else sweep.compose(
                    model, point, i, state, world, key, signature, watch)
                if composed is not None:  # composed, not resumed (pairs)
                    sweep.record(model, point, i, state, composed[0], after_kill, False, key,
                                 True)
                    continue
                fresh = result is None
                if fresh:
                    w = copy.deepcopy(world) if i < len(states) - 1 else world
                    result = resume_and_judge(ex, sweep.golden, w, state,
                                              sweep.schedule(point), watch, sweep.keep_traces,
                                              keep_tail=sweep.observed is not None)
                    sweep.learn(key, state, signature, watch, result)
                sweep.record(model, point, i, state, result, after_kill, fresh, key)
        sweep.done_points += 1
        if progress is not None:
            progress(sweep.done_points, len(chosen))
