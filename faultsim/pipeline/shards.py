"""Shards of crash states, mode-neutral: the classes of keys a state can share a verdict
by (union-find), and the shard a class belongs to (a stable hash of its least key: the
same in every shard, on every machine). The in-process survey (faultsim.inprocess
.sharding) and subprocess mode's judging (faultsim.real.judging) split states with them.
Standard library only."""
from __future__ import annotations

import hashlib


class Classes:
    """Union-find over the keys a state can be shared by."""

    def __init__(self) -> None:
        self.parent: dict[tuple, tuple] = {}

    def find(self, x: tuple) -> tuple:
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: tuple, b: tuple) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # the lesser root stays: the class's least key is its name
            lo, hi = (ra, rb) if repr(ra) <= repr(rb) else (rb, ra)
            self.parent[hi] = lo


def shard_of(name: tuple, n: int) -> int:
    """The shard (0-based) a class named `name` belongs to: a stable hash, not Python's."""
    return int(hashlib.sha256(repr(name).encode()).hexdigest()[:16], 16) % n
