"""The per-kill-point shortcuts of a sweep's bookkeeping against the long way: a state's
digest with its big files entered by their memoised digests, the torn versions of a write
hashed in one pass, and the checkpoint parse memoised per bytes object, each compared with
computing it from the bytes afresh (issue 32: faultsim's own work per kill point follows
the bytes changed, not the size of the files)."""
from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from faultsim.core import checkpoints, crashmodel
from faultsim.core.crashmodel import LARGE, CrashState, file_digest, files_digest, torn_versions
from faultsim.core.trace import PendingWrite


def blake(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


contents = st.one_of(st.none(), st.binary(max_size=64),
                     st.builds(lambda b, n: (b * n)[:LARGE + 3 * n], st.binary(min_size=1,
                                                                               max_size=8),
                               st.integers(LARGE, 2 * LARGE)))
trees = st.dictionaries(st.sampled_from(["a", "b", "d/c.json", "d/e"]), contents, max_size=4)


@settings(max_examples=60, deadline=None)
@given(trees, trees)
def test_equal_digests_are_equal_states(a, b):
    """The digest tells states apart exactly as their files do, memo or no memo: a large
    file entering by its digest never equals a small one entering by its bytes."""
    da, db = CrashState.of("process", "", a), CrashState.of("process", "", b)
    assert (da.digest() == db.digest()) == (da.files == db.files)
    crashmodel._memo.clear()  # recomputed from the bytes: the same digest
    again = files_digest(tuple(sorted({p: (bytes(bytearray(d)) if d is not None else None)
                                        for p, d in a.items()}.items())))
    assert again == da.digest()


def test_a_memoised_file_digest_is_the_digest_of_its_bytes():
    big = b"x" * (LARGE + 10)
    assert file_digest(big) == blake(big)
    assert file_digest(big) == blake(big)  # from the memo
    other = b"y" * (LARGE + 10)
    assert file_digest(other) == blake(other)
    # an object whose id a dead one had is never given the dead one's digest: the entry
    # holds its bytes and is checked by identity
    crashmodel._memo[id(other) + 1] = (big, b"wrong")
    assert file_digest(other) == blake(other)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3 * LARGE), st.binary(min_size=1, max_size=3 * LARGE),
       st.lists(st.integers(0, 3 * LARGE), min_size=1, max_size=12), st.data())
def test_torn_versions_are_the_torn_bytes_and_their_digests(old, new, cuts, data):
    """One pass over the write gives, for every kill point inside it, the bytes `torn`
    gives and the digest hashing those bytes gives (offsets in any order, repeated)."""
    write = PendingWrite("f", old, new, lambda b: None)
    room = max(1, len(new) - write.start)
    offsets = [c % room for c in cuts]
    if data.draw(st.booleans()):
        offsets.reverse()
    crashmodel._memo.clear()
    versions = torn_versions(write, offsets)
    assert versions == [write.torn(o) for o in offsets]
    for version in versions:
        assert file_digest(version) == blake(version)  # memoised, or hashed now


def test_whole_is_memoised_per_bytes_object_and_agrees_with_parsing():
    spec = checkpoints.DEFAULT
    good, torn = b'{"messages": [1, 2]}', b'{"messages": [1, '
    for data in (good, torn, bytes(bytearray(good)), bytes(bytearray(torn))):
        assert checkpoints.whole(spec, "checkpoint.json", data) == \
            checkpoints._whole(spec, "checkpoint.json", data)
        assert checkpoints.whole(spec, "checkpoint.json", data) == \
            checkpoints._whole(spec, "checkpoint.json", data)  # from the memo
    assert checkpoints.whole(spec, "checkpoint.json", torn) is not None
    assert checkpoints.whole(spec, "checkpoint.json", good) is None
