"""Crash models: what the next incarnation finds on disk after a kill.

- `process` (SIGKILL): every completed operation survives, the page cache included; a kill
  inside a write leaves the bytes written so far.
- `power` (power loss): only what was fsynced is sure to survive. Following ALICE's abstract
  persistence model, bounded: file data and directory entries persist independently of each
  other (a file's data needs an fsync of the file, a name needs an fsync of its directory),
  and unsynced data may also be torn at sector granularity. Each outcome is named, so a
  verdict says which persisted subset it needed.

  What a tear may damage follows the hardware: only sectors that an unsynced write
  changed, never bytes an fsync made sure of. By default the disk is assumed to do
  *powersafe overwrite* (SQLite's SQLITE_IOCAP_POWERSAFE_OVERWRITE, true of every disk
  that keeps a capacitor or journal for its write cache): a torn write damages only the
  bytes it wrote, even in a sector it shares with synced bytes. A scenario can drop that
  assumption (`[fault_profile] powersafe_overwrite = false`): then that shared sector may
  be damaged whole, the synced bytes in it too.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

CRASH_MODELS = ("process", "power")  # what a kill leaves on disk; "all" names these
# the incarnation that was not dead: frozen at a kill point, woken later beside the next
# one (faultsim.inprocess.pause); asked by name only, never part of "all"
PAUSE = "pause"
MODEL_NAMES = (*CRASH_MODELS, PAUSE)
# a pause schedule's wake point as a verdict's (and a replay token's) `order`: 0 the new
# incarnation's first model request, N its N-th checkpoint save, WAKE_END its end
WAKE_END = 10_000


def wake_label(order: int) -> str:
    """The wake point a pause verdict's `order` names, in words."""
    return "request" if order == 0 else "end" if order == WAKE_END else f"save {order}"
SECTOR = 512

Files = Mapping[str, "bytes | None"]

DIR = None  # a directory in a snapshot


@dataclass
class Durability:
    """What an fsync has made sure of, for the power-loss model.

    `data[ino]` is a file's content as of its last fsync (missing: never synced, so a power
    loss leaves it empty); `entries[ino]` a directory's names as of its last fsync.
    Everything present when an incarnation starts is durable (it is what was on disk).
    """

    data: dict[int, bytes] = field(default_factory=dict)  # file inode -> synced bytes
    entries: dict[int, dict[str, int]] = field(default_factory=dict)  # dir inode -> names
    dirs: set[int] = field(default_factory=set)  # inodes known to be directories
    root: int = 0
    last_written: list[str] = field(default_factory=list)  # unsynced files, oldest first


@dataclass(frozen=True)
class CrashState:
    model: str
    persisted: str  # which subset survived, in words
    files: tuple[tuple[str, bytes | None], ...]  # sorted (path, bytes or None for a dir)

    @classmethod
    def of(cls, model: str, persisted: str, files: Files) -> "CrashState":
        return cls(model, persisted, tuple(sorted(files.items())))

    def as_dict(self) -> dict[str, bytes | None]:
        return dict(self.files)

    def digest(self) -> str:
        # Asked several times per state by a sweep (its memo key, its class's keys, the
        # pair stage's check): computed once. The instance is frozen; the cache is no field.
        found = self.__dict__.get("_digest")
        if found is None:
            found = files_digest(self.files)
            object.__setattr__(self, "_digest", found)
        return found


class TornState(CrashState):
    """A crash state whose file `path` is a torn copy of one write (`PendingWrite.torn`:
    the new bytes up to `cut`, the old ones after it), kept as that recipe and made again
    on each read of `files`. For the states a sweep holds once keyed (parked, judged,
    kept in verdicts): every kill point inside a write leaves its own torn copy of the
    file, so a checkpoint rewritten whole each step holds O(N^2) bytes of them over an
    N-step run (790 MB of the 1 GB peak at 200 steps), while the write's old and new
    bytes are one pair per write, shared by all its points. To every reader it is the state it was made from: equal,
    the same hash, digest and pickle round trip (tests/test_crashmodel.py)."""

    def __init__(self, state: CrashState, path: str, new: bytes, old: bytes,
                 cut: int, bases: dict | None = None) -> None:
        base = tuple((p, None if p == path else d) for p, d in state.files)
        if bases is not None:  # the other files, one tuple for every point of the write
            base = bases.setdefault(base, base)
        for name, value in (("model", state.model), ("persisted", state.persisted),
                            ("_base", base),
                            ("_path", path), ("_new", new), ("_old", old), ("_cut", cut),
                            ("_digest", state.digest())):
            object.__setattr__(self, name, value)

    @property
    def files(self) -> "tuple[tuple[str, bytes | None], ...]":  # type: ignore[override]
        torn = self._new[:self._cut] + self._old[self._cut:]
        return tuple((p, torn if p == self._path else d) for p, d in self._base)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CrashState):
            return NotImplemented
        return (self.model, self.persisted, self.files) == (other.model, other.persisted,
                                                            other.files)

    __hash__ = CrashState.__hash__


def kept_torn(state: CrashState, write, offset: int, torn: bytes,
              bases: dict | None = None) -> CrashState:
    """`state` as a `TornState` where its copy of `write`'s file is `torn`, the very bytes
    `write.torn(offset)` made (`torn_versions`); otherwise `state` itself (a power loss may
    keep another copy of the file; small files are kept as they are). `bases`: a dict
    shared by the states of one write, that share their other files too."""
    data = dict(state.files).get(write.path)
    if data is not torn or len(torn) < LARGE:
        return state
    cut = write.start + offset
    # past the old bytes' end (an append) the recipe reads none of them: not kept alive
    old = write.old if cut < len(write.old) else b""
    return TornState(state, write.path, write.new, old, cut, bases)


def files_digest(files: "tuple[tuple[str, bytes | None], ...]") -> str:
    """The digest of sorted (path, bytes or None) pairs: one hash update, not two a file.

    A file of `LARGE` bytes or more enters by its own digest (`file_digest`, memoised per
    bytes object), so keying a state costs O(files) plus the bytes not hashed before, not
    O(every byte): a sweep keys a state at every kill point (exact, masked and absent
    digests), and the sandbox's big files are the same objects from one point to the next.
    Sound: equal contents give equal encodings (the length picks the form, so a small and
    a large file never share one), and the per-file digest is the same function of the
    bytes whether memoised or not (tests/test_digests.py compares with hashing them)."""
    parts = []
    for path, data in files:
        parts.append(path.encode() + b"\0")
        if data is None:
            parts.append(b"D")
        elif len(data) < LARGE:
            parts.append(b"F%d\0" % len(data))
            parts.append(data)
        else:
            parts.append(b"H%d\0" % len(data))
            parts.append(file_digest(data))
    return hashlib.blake2b(b"".join(parts), digest_size=16).hexdigest()


LARGE = 4096  # below this, hashing the bytes again costs about what a memo lookup does
_MEMO_BYTES = 64 << 20  # the memo keeps its bytes alive: bounded, then started afresh
_memo: dict[int, tuple[bytes, bytes]] = {}  # id(data) -> (data, its digest)
_memo_size = 0


def file_digest(data: bytes) -> bytes:
    """blake2b-128 of one file's bytes, memoised by the bytes object itself (the entry
    holds it, so its id is not reused while the entry lives)."""
    found = _memo.get(id(data))
    if found is not None and found[0] is data:
        return found[1]
    digest = hashlib.blake2b(data, digest_size=16).digest()
    remember(data, digest)
    return digest


def remember(data: bytes, digest: bytes) -> None:
    """Memoise `digest` as the digest of `data` (a caller that hashed it incrementally,
    `PendingWrite.torn_states`, must pass blake2b-128 of exactly these bytes)."""
    global _memo_size
    if len(data) < LARGE:
        return
    if _memo_size + len(data) > _MEMO_BYTES:
        _memo.clear()
        _memo_size = 0
    _memo[id(data)] = (data, digest)
    _memo_size += len(data)


def forget(datas: "list[bytes]") -> None:
    """Drop these bytes from the digest memo (`torn_versions`' copies, once every state
    made of them is keyed: they are not met again, and the memo would keep them alive)."""
    global _memo_size
    for data in datas:
        found = _memo.get(id(data))
        if found is not None and found[0] is data:
            del _memo[id(data)]
            _memo_size -= len(data)


def torn_versions(write, offsets: "list[int]") -> list[bytes]:
    """`write.torn(o)` for each of `offsets`, all at once (`each_torn_version`)."""
    return list(each_torn_version(write, offsets))


def each_torn_version(write, offsets: "Iterable[int]") -> "Iterator[bytes]":
    """`write.torn(o)` for each of `offsets` (a `trace.PendingWrite`), made one at a time
    as they are asked for, their digests memoised as they are made: one pass of the hash
    over the new bytes for every kill point inside the write (in ascending offsets, as
    kill points come), not one pass each (a checkpoint rewritten whole has a kill point
    every 512 bytes). Each digest is blake2b-128 of exactly that version's bytes: the
    prefix's hash state is copied, then the old tail hashed on top. One at a time: a
    caller that drops each version once used holds one copy of the file, not one a cut
    (a new 50 MB file's 32 cut prefixes at once: 0.45 GB; an overwrite's, 50 MB each)."""
    start, new, old = write.start, write.new, write.old
    h = hashlib.blake2b(digest_size=16)
    done = 0
    view = memoryview(new)
    for offset in offsets:
        cut = start + offset
        if cut < done:  # an offset below the last one: hash its prefix afresh
            h, done = hashlib.blake2b(digest_size=16), 0
        h.update(view[done:cut])
        done = cut
        data = write.torn(offset)
        if len(data) >= LARGE:
            tail = old[cut:]
            if tail:
                whole = h.copy()
                whole.update(tail)
                remember(data, whole.digest())
            else:
                remember(data, h.digest())
        yield data


def process_state(snapshot: Files) -> list[CrashState]:
    return [CrashState.of("process", "every completed operation", snapshot)]


def _walk_durable(d: Durability, content_of) -> dict[str, bytes | None]:
    """The tree as the synced directory entries describe it."""
    out: dict[str, bytes | None] = {}

    def walk(ino: int, prefix: str) -> None:
        for name, child in sorted(d.entries.get(ino, {}).items()):
            rel = prefix + name
            if child in d.dirs:
                out[rel] = DIR
                walk(child, rel + "/")
            else:
                out[rel] = content_of(child)

    walk(d.root, "")
    return out


def unsynced_sectors(base: bytes, new: bytes) -> list[int]:
    """The sectors of `new` that hold bytes an fsync has not made sure of: bytes past the
    synced length, or different from the synced ones. An unsynced write can tear only
    these; a sector no unsynced write changed is never rewritten by the disk."""
    # skip the long identical prefix of an append or a rewrite first
    n = min(len(base), len(new))
    i = 0
    while i + 4096 <= n and base[i:i + 4096] == new[i:i + 4096]:
        i += 4096
    out = []
    overlap_end = math.ceil(n / SECTOR)  # sectors holding synced bytes: compare them
    for s in range(i // SECTOR, overlap_end):
        a, b = s * SECTOR, (s + 1) * SECTOR
        if new[a:b] != base[a:b]:
            out.append(s)
    # every sector wholly past the synced length is unsynced
    out.extend(range(overlap_end, math.ceil(len(new) / SECTOR)))
    return out


def _damaged(new: bytes, base: bytes, fill: int) -> bytes:
    """`new` with every byte that differs from `base` (same length) replaced by `fill`,
    computed on whole integers: a byte-level loop cost ~90 ms per 100 KB overwrite."""
    size = len(new)
    n, b = int.from_bytes(new, "big"), int.from_bytes(base, "big")
    d = n ^ b
    d |= d >> 4  # fold each byte's bits into its lowest bit (the bits that reach
    d |= d >> 2  # bit 0 are bits 0-7 of the same byte: 4 + 2 + 1 = 7)
    d |= d >> 1
    mask = (d & int.from_bytes(b"\x01" * size, "big")) * 0xFF
    out = (n & ~mask) | (int.from_bytes(bytes([fill]) * size, "big") & mask)
    return out.to_bytes(size, "big")


def torn(base: bytes, new: bytes, sectors: list[int], k: int, fill: bytes | None,
         powersafe: bool) -> bytes:
    """`new` with the unsynced `sectors` from the k-th on not written: each is filled
    (zero or garbage) or, for `fill=None`, left as it was synced. With `powersafe`, only the
    unsynced bytes of a sector are damaged, never synced bytes sharing it."""
    out = bytearray(new)
    for first, last in _runs(sectors[k:]):  # whole runs at once: the same, bytewise
        a, b = first * SECTOR, min((last + 1) * SECTOR, len(new))
        if fill is None:
            out[a:b] = base[a:b]
        elif not powersafe:
            out[a:b] = fill * (b - a)
        else:
            # past the synced length every byte is unsynced; below it, only changed ones
            cut = max(a, min(b, len(base)))
            if cut > a:
                out[a:cut] = _damaged(new[a:cut], base[a:cut], fill[0])
            out[cut:b] = fill * (b - cut)
    return bytes(out)


def _runs(sectors: list[int]) -> list[tuple[int, int]]:
    """Consecutive sectors as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for s in sectors:
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def _region(sectors: list[int], new: bytes) -> str:
    end = min((sectors[-1] + 1) * SECTOR, len(new))
    return f"of unsynced bytes {sectors[0] * SECTOR}-{end}"


def torn_variants(path: str, base: bytes, new: bytes, *, powersafe: bool = True
                  ) -> list[tuple[str, bytes]]:
    """The torn outcomes of the unsynced writes to one file, named by the region they tore.

    The disk writes whole sectors, in any order; we keep a bounded, deterministic subset:
    the unsynced region landed up to a sector boundary inside it (after its first sector,
    its middle, all but its last), the rest zero-filled (garbage-filled at the middle),
    and, where the region overwrote synced bytes, the rest left as synced. Without
    `powersafe` (SQLite's SQLITE_IOCAP_POWERSAFE_OVERWRITE off), a sector that an unsynced
    write shares with synced bytes may be damaged whole, the synced bytes with it."""
    sectors = unsynced_sectors(base, new)
    n = len(sectors)
    if not n:
        return []
    region = _region(sectors, new)
    middle = max(1, n // 2)
    out = []
    for k in sorted({1, n // 2, n - 1}):
        if not 1 <= k < n:
            continue
        out.append((f"{path} torn after sector {k}/{n} {region}, zero-filled",
                    torn(base, new, sectors, k, b"\0", powersafe)))
        if k == middle:
            out.append((f"{path} torn after sector {k}/{n} {region}, garbage-filled",
                        torn(base, new, sectors, k, b"\xa5", powersafe)))
            if all(min((s + 1) * SECTOR, len(new)) <= len(base) for s in sectors[k:]):
                # the rest of the region overwrote synced bytes: it may still hold them
                out.append((f"{path} torn after sector {k}/{n} {region}, the rest as "
                            "synced", torn(base, new, sectors, k, None, powersafe)))
    first = sectors[0] * SECTOR
    if not powersafe and any(new[i] == base[i] for i in range(
            first, min(first + SECTOR, len(base), len(new)))):
        # the sector shared with synced bytes damaged whole (only without powersafe)
        out.append((f"{path} torn before sector 1/{n} {region}, zero-filled with the "
                    "synced bytes sharing it (no powersafe overwrite)",
                    torn(base, new, sectors, 0, b"\0", False)))
    return [(name, data) for name, data in out if data != base]


def power_states(snapshot: Files, inodes: Mapping[str, int], d: Durability, *,
                 powersafe: bool = True) -> list[CrashState]:
    """The bounded set of power-loss outcomes at this instant, deterministic in order."""
    current_by_ino = {inodes[p]: data for p, data in snapshot.items() if data is not DIR}

    def synced(ino: int) -> bytes:
        return d.data.get(ino, b"")

    def current(ino: int) -> bytes:
        return current_by_ino.get(ino, synced(ino))

    candidates: list[tuple[str, dict]] = [
        ("everything persisted", dict(snapshot)),
        ("names persisted, unsynced data lost",
         {p: data if data is DIR else synced(inodes[p]) for p, data in snapshot.items()}),
        ("data persisted, unsynced names lost", _walk_durable(d, current)),
        ("nothing unsynced persisted", _walk_durable(d, synced)),
    ]
    # The most recently written unsynced file, torn within the sectors it did not sync.
    torn_path = next((p for p in reversed(d.last_written) if isinstance(snapshot.get(p), bytes)
                      and snapshot[p] != synced(inodes[p])), None)
    if torn_path is not None:
        for name, data in torn_variants(torn_path, synced(inodes[torn_path]),
                                        snapshot[torn_path], powersafe=powersafe):
            candidates.append((name, {**snapshot, torn_path: data}))
    seen, out = set(), []
    for persisted, files in candidates:
        state = CrashState.of("power", persisted, files)
        if state.files not in seen:
            seen.add(state.files)
            out.append(state)
    return out
