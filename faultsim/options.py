"""The rules of the settings every front end shares, in one place: which crash models a
request names, how many crashes, the shard and the kill points a run keeps.

The explorer (both modes), the pointwise explorer of the pytest plugin and the CLI use these
rather than each its own copy. (One validated options object built by every front end is
the next step; these are the rules it will hold.) Standard library and crashmodel only: the
plugin imports this at load time."""
from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

from .crashmodel import CRASH_MODELS

P = TypeVar("P")


def crash_models(crash_model: str | Iterable[str]) -> list[str]:
    """The crash models "process", "power", "all" or a list of them name."""
    if isinstance(crash_model, str):
        names = list(CRASH_MODELS) if crash_model == "all" else [crash_model]
    else:
        names = list(crash_model)
    for name in names:
        if name not in CRASH_MODELS:
            raise ValueError(f"unknown crash model {name!r}; expected process, power or all")
    return names


def check_crashes(crashes: int) -> int:
    if crashes < 1:
        raise ValueError(f"crashes must be at least 1, not {crashes}")
    return crashes


def check_shard(shard: tuple[int, int] | None) -> tuple[int, int] | None:
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"shard {shard[0]}/{shard[1]}: expected 1 <= i <= n")
    return shard


def in_shard(position: int, shard: tuple[int, int] | None) -> bool:
    """Shard i of n keeps the kill points whose position is i - 1 modulo n: the n shards
    partition the kill points, deterministically (a CI matrix)."""
    return shard is None or position % shard[1] == shard[0] - 1


def select(points: Sequence[P], only: Callable[[P], bool] | None,
           shard: tuple[int, int] | None) -> list[P]:
    """The kill points a run explores: those `only` keeps (a replay), in its shard."""
    return [p for n, p in enumerate(points) if (only is None or only(p)) and in_shard(n, shard)]
