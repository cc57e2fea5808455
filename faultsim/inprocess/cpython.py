"""What faultsim's readers of CPython internals know of the interpreter they run on, so
that none of them guesses: the versions they were written and tested against, each with
the opcode names whose meaning they know (of those, the jumps and the instructions after
which control never falls through), the exception table those versions encode, and the
type a frame's `f_locals` has there. unwind.py (what a kill unwinds through) and
fingerprints.py (which locals a frame can still read; the agent's memory) ask here first.

Where the answer is "not known" (another implementation or version, an opcode outside the
version's set, a table whose entries do not fall on the code's instructions, an
`f_locals` of another type) the reader takes the long way: unwind.py forks the child that
learns the kill's aftermath, the liveness pass keeps every local, convergence cuts no
resumed run. That is sound because each long way is exactly what its shortcut stands in
for (the fork, the whole frame, the run to its end), and the shortcut is proven equal to
it on these versions only (tests/test_unwind.py, tests/test_convergence.py,
tests/test_cpython_readers.py). A release can renumber, split, rename or add opcodes
(3.12 and 3.13 did, for jumps and locals) and change what `f_locals` is (PEP 667, 3.13):
a reader that went on by name alone could mistake a new instruction's effect and cut where
the run differs, a missed bug, not a crash. A version joins `KNOWN` when those tests pass
on it, its set taken from its own `dis.opmap` and each name's meaning checked
against the readers.

Standard library only.
"""
from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shapes:
    """One CPython version as the readers know it."""

    opcodes: frozenset  # every opcode name the readers know the meaning of
    jumps: frozenset  # those whose `argval` is the offset they may jump to
    stops: frozenset  # those after which control never goes on to the next instruction


_3_11 = Shapes(
    opcodes=frozenset("""
        ASYNC_GEN_WRAP BEFORE_ASYNC_WITH BEFORE_WITH BINARY_OP BINARY_SUBSCR
        BUILD_CONST_KEY_MAP BUILD_LIST BUILD_MAP BUILD_SET BUILD_SLICE BUILD_STRING
        BUILD_TUPLE CACHE CALL CALL_FUNCTION_EX CHECK_EG_MATCH CHECK_EXC_MATCH COMPARE_OP
        CONTAINS_OP COPY COPY_FREE_VARS DELETE_ATTR DELETE_DEREF DELETE_FAST DELETE_GLOBAL
        DELETE_NAME DELETE_SUBSCR DICT_MERGE DICT_UPDATE END_ASYNC_FOR EXTENDED_ARG
        FORMAT_VALUE FOR_ITER GET_AITER GET_ANEXT GET_AWAITABLE GET_ITER GET_LEN
        GET_YIELD_FROM_ITER IMPORT_FROM IMPORT_NAME IMPORT_STAR IS_OP JUMP_BACKWARD
        JUMP_BACKWARD_NO_INTERRUPT JUMP_FORWARD JUMP_IF_FALSE_OR_POP JUMP_IF_TRUE_OR_POP
        KW_NAMES LIST_APPEND LIST_EXTEND LIST_TO_TUPLE LOAD_ASSERTION_ERROR LOAD_ATTR
        LOAD_BUILD_CLASS LOAD_CLASSDEREF LOAD_CLOSURE LOAD_CONST LOAD_DEREF LOAD_FAST
        LOAD_GLOBAL LOAD_METHOD LOAD_NAME MAKE_CELL MAKE_FUNCTION MAP_ADD MATCH_CLASS
        MATCH_KEYS MATCH_MAPPING MATCH_SEQUENCE NOP POP_EXCEPT POP_JUMP_BACKWARD_IF_FALSE
        POP_JUMP_BACKWARD_IF_NONE POP_JUMP_BACKWARD_IF_NOT_NONE POP_JUMP_BACKWARD_IF_TRUE
        POP_JUMP_FORWARD_IF_FALSE POP_JUMP_FORWARD_IF_NONE POP_JUMP_FORWARD_IF_NOT_NONE
        POP_JUMP_FORWARD_IF_TRUE POP_TOP PRECALL PREP_RERAISE_STAR PRINT_EXPR PUSH_EXC_INFO
        PUSH_NULL RAISE_VARARGS RERAISE RESUME RETURN_GENERATOR RETURN_VALUE SEND
        SETUP_ANNOTATIONS SET_ADD SET_UPDATE STORE_ATTR STORE_DEREF STORE_FAST STORE_GLOBAL
        STORE_NAME STORE_SUBSCR SWAP UNARY_INVERT UNARY_NEGATIVE UNARY_NOT UNARY_POSITIVE
        UNPACK_EX UNPACK_SEQUENCE WITH_EXCEPT_START YIELD_VALUE""".split()),
    jumps=frozenset("""
        FOR_ITER JUMP_BACKWARD JUMP_BACKWARD_NO_INTERRUPT JUMP_FORWARD JUMP_IF_FALSE_OR_POP
        JUMP_IF_TRUE_OR_POP POP_JUMP_BACKWARD_IF_FALSE POP_JUMP_BACKWARD_IF_NONE
        POP_JUMP_BACKWARD_IF_NOT_NONE POP_JUMP_BACKWARD_IF_TRUE POP_JUMP_FORWARD_IF_FALSE
        POP_JUMP_FORWARD_IF_NONE POP_JUMP_FORWARD_IF_NOT_NONE POP_JUMP_FORWARD_IF_TRUE
        SEND""".split()),
    stops=frozenset("""
        JUMP_FORWARD JUMP_BACKWARD JUMP_BACKWARD_NO_INTERRUPT RETURN_VALUE RAISE_VARARGS
        RERAISE""".split()))

# (implementation, major, minor) -> what the readers know of it. 3.11 only: the one
# interpreter the suite runs on here (issue 54 adds 3.13 and 3.14 to CI; each joins once
# the readers' tests pass on it).
KNOWN: dict[tuple[str, int, int], Shapes] = {("cpython", 3, 11): _3_11}


def _running() -> tuple[str, int, int]:
    return (sys.implementation.name, *sys.version_info[:2])


def shapes() -> Shapes | None:
    """What the readers know of the running interpreter; None: nothing."""
    return KNOWN.get(_running())


def unknown() -> str | None:
    """Why the running interpreter is not one the readers know (None: it is)."""
    if shapes() is not None:
        return None
    name, major, minor = _running()
    known = ", ".join(f"{'CPython' if n == 'cpython' else n} {a}.{b}"
                      for n, a, b in sorted(KNOWN))
    return (f"{'CPython' if name == 'cpython' else name} {major}.{minor} is not a version "
            f"whose bytecode and frames faultsim reads (it reads {known})")


def instructions(code: types.CodeType) -> list[dis.Instruction] | None:
    """`code`'s instructions, where the running version and every opcode in it are known;
    None where one is not (the reader refuses)."""
    known = shapes()
    if known is None:
        return None
    found = list(dis.get_instructions(code))
    if any(i.opname not in known.opcodes for i in found):
        return None
    return found


_CALLS: dict = {}


def position(code: types.CodeType, lasti: int) -> int:
    """Where a frame stands, as one offset whatever the interpreter has specialised: on
    3.11 a frame that called a C function which called back into Python (Context.run,
    sorted's key, a builtin's callback) reads as standing at its PRECALL once that
    instruction is specialised (the specialised PRECALL makes the call itself and skips
    the CALL) and at the CALL before, and whether it is depends on how often the code ran
    before in the process. Both are the one call (PRECALL only prepares it; nothing reads
    or writes a local in between), so a PRECALL reads as the CALL after it. Unchanged
    where the instructions are not known (`instructions`)."""
    table = _CALLS.get(code)
    if table is None:
        found = instructions(code) or ()
        table = _CALLS[code] = {a.offset: b.offset for a, b in zip(found, found[1:])
                                if a.opname == "PRECALL" and b.opname == "CALL"}
    return table.get(lasti, lasti)


def exception_table(code: types.CodeType, offsets: Any) -> list | None:
    """`code`'s exception table (entries with start, end, target), where the version is
    known, the entries `dis` reads encode back to the very bytes the code holds (`dis`
    stops quietly at a truncated entry: a handler dropped so would read as none), and each
    is a range inside the code whose handler starts at one of its instructions
    (`offsets`). None otherwise (the reader refuses)."""
    if shapes() is None:
        return None
    try:
        entries = dis.Bytecode(code).exception_entries
    except Exception:  # a table this `dis` cannot decode
        return None
    size = len(code.co_code)
    if _encoded(entries) != code.co_exceptiontable or not all(
            0 <= e.start < e.end <= size and e.target in offsets for e in entries):
        return None
    return entries


def _encoded(entries: list) -> bytes | None:
    """The table as 3.11's compiler writes it (Python/compile.c,
    assemble_emit_exception_table_entry): per entry its start, length, target (in code
    units) and depth << 1 | lasti, each in 6-bit groups, most significant first, 64 on
    every group but the last, 128 on an entry's first byte. A version whose compiler
    writes tables otherwise fails tests/test_cpython_readers.py's round trip over a few
    hundred functions, so it cannot join `KNOWN` unnoticed."""
    out = bytearray()
    for e in entries:
        values = (e.start // 2, (e.end - e.start) // 2, e.target // 2,
                  e.depth << 1 | int(e.lasti))
        if e.start % 2 or e.end % 2 or e.target % 2 or min(values) < 0:
            return None
        for n, value in enumerate(values):
            groups = [value & 63]
            while value >> 6:
                value >>= 6
                groups.append(value & 63)
            groups.reverse()
            item = [g | 64 for g in groups[:-1]] + groups[-1:]
            if n == 0:
                item[0] |= 128
            out += bytes(item)
    return bytes(out)


def frame_locals(frame: types.FrameType) -> dict | None:
    """A frame's locals as the readers know them (on 3.11 a dict of the bound names); None
    where the version or the mapping's type is not known (3.13's write-through proxy)."""
    if shapes() is None:
        return None
    values = frame.f_locals
    return values if type(values) is dict else None

