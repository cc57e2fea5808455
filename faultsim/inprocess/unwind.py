"""What a kill would set off: whether the stack at a kill point provably lets the kill
through to `run()` with nothing run on the way, read from the code instead of a fork.

Why. The forking executor forks a child at every first crash's kill point, even where
every crash state there is judged already, only to learn what the killed incarnation does
after the kill (`after_kill`, judged by `no_work_after_kill`; finality.py). A fork and exit
costs some 5-10 ms of CPU on these machines, a quarter of a sweep's work. Where this module
shows that the kill would unwind to `run()` without running a line of the agent's, that
aftermath is known without the child: empty.

How. A kill is an exception raised in the frame that emits the kill point's event; it
leaves each frame on the way up through the handler that covers the frame's current
instruction (CPython 3.11's exception table), or straight out where none does. A frame
lets it through quietly when every handler it meets on the way out provably re-raises it
after running nothing but known code:

- `except A:` / `except (A, B) as e:` clauses whose classes are not among the kill's
  bases (the match is `PyType_IsSubtype`, no `__subclasscheck__` runs), the classes read
  as the bytecode reads them: module globals, builtins, attributes found in a module's
  `__dict__` (no `__getattr__` runs), tuples of those. A clause that matches, or a class
  this cannot read, refuses;
- the cleanup handlers the compiler adds around them (`COPY 3; POP_EXCEPT; RERAISE 1`,
  and the `del e` of an `except ... as e`);
- `finally:` bodies that are straight-line calls of known cleanup (closing a descriptor,
  `os.close(fd)` through pyfakefs's `os` too, whose `close` is a method of its class; a
  context variable set back, `VAR.set(previous)`) and re-raise;
- `with` blocks over a file opened by a known opener called in the same statement (`with
  open(p, "wb") as f`, `with os.fdopen(fd) as f`, `with open(self.path + ".tmp", "w")`:
  its arguments were computed before the kill, whatever they read): the file's
  `__exit__` closes it.
  (After the kill the sandbox is sealed: the close lands nothing and raises nothing;
  tests/test_unwind.py checks it against the fork.)
- faultsim's own file system hooks, whose `finally` only keeps its lookup caches true.

No local variable is read (an argument is passed, never looked at: `frame.f_locals` would
keep every local of the frame alive), so `with path.open()` and `finally: f.close()`,
whose callee is a local's, refuse.

Anything else (a matching or unreadable clause, another context manager, a `finally`
with a branch or another call, a frame of `__del__` or of a weakref finaliser, where a
kill raised is swallowed as unraisable and the agent goes on) refuses: the child is
forked as before. A frame that is not under `run_agent` (another thread) refuses too, and
so does one whose code cpython.py does not vouch for: the handler sequences, jumps and
`starts_line` read here are CPython 3.11's, so on another version, and for code with an
opcode or an exception table that version's set does not hold, every point forks.

Assumed, as the fork itself already assumes: the kill unwinds frame by frame (no C code
between two frames swallows it: the C functions that swallow exceptions run callbacks
from finalisers, which are refused by name; a raw weakref callback is not recognised),
and the objects freed on the way (a frame's locals) run no `__del__` or generator
`finally` that asks the model, calls a service or marks. Where that assumption is wrong,
the fork would have reported `no_work_after_kill` for code a real SIGKILL never runs
(finality.py, rule 2): this reads what the real kill does.

Counted, so that a shortcut that is off says so (issue 53; it had been off for the
reference agent for weeks, unseen): the report's `shortcuts` block counts each first crash
state whose kill was read and, for the others, the frame that stopped the reading
(`refusal`). Both executors read it at the kill from the same frame (forking.ForkAt at
every first crash's point, sandbox.KillAt at its own kill), so the count is the same
whichever ran, on any worker count, and shards add up to the whole run's.
"""
from __future__ import annotations

import contextvars
import posix
import types
from typing import Any

from . import cpython

_Refuse = object()  # a value this cannot read: a clause or callee built from it refuses
_Local = object()  # a local variable's value, not read (see `_load`)

_tables: dict[types.CodeType, tuple | None] = {}


def _code_info(code: types.CodeType) -> tuple | None:
    """`code`'s exception table, instructions and their index by offset; None where the
    version, an opcode in it or its table is not one this reads (cpython.py): the frame
    refuses, and the point is forked as it would be without this module."""
    if code in _tables:
        return _tables[code]
    info = None
    instructions = cpython.instructions(code)
    if instructions is not None:
        index = {ins.offset: n for n, ins in enumerate(instructions)}
        table = cpython.exception_table(code, index)
        if table is not None:
            info = (table, instructions, index)
    _tables[code] = info
    return info


def quiet(frame: types.FrameType, kill: type[BaseException], stop: types.CodeType) -> bool:
    """True when `kill`, raised in `frame`, provably reaches the frame running `stop` (the
    code of `run_agent`) with no code run on the way but known cleanup."""
    return refusal(frame, kill, stop) is None


def refusal(frame: types.FrameType, kill: type[BaseException], stop: types.CodeType
            ) -> str | None:
    """Why `quiet` is not shown, in a phrase naming the frame (function and file name, no
    folder or line: the same on any machine, and one reason per function in the report's
    `shortcuts`); None where it is."""
    f = frame
    while f is not None:
        if f.f_code is stop:
            return None
        name, path = f.f_code.co_name, f.f_code.co_filename
        if name == "__del__" or path.endswith(("weakref.py", "atexit.py")):
            # a finaliser: a kill raised there is swallowed (unraisable)
            return f"the kill is raised in a finaliser ({_where(f)}), which swallows it"
        if f.f_code not in _audited():
            if _code_info(f.f_code) is None:
                return f"{_where(f)} holds bytecode this reader does not know"
            if not _frame_lets_through(f, kill):
                return (f"{_where(f)} may run code as the kill unwinds (an except, finally "
                        "or with not shown to let it through)")
        f = f.f_back
    return "the kill is raised outside the agent's run (another thread)"


def _where(f: types.FrameType) -> str:
    code = f.f_code
    return f"{code.co_qualname} in {code.co_filename.rsplit('/', 1)[-1]}"


_AUDITED: set | None = None


def _audited() -> set:
    """faultsim's own frames a kill unwinds through whose handlers are known to run only
    its bookkeeping: the file system hooks' `finally: _changed(...)`, which keeps the
    lookup caches true (inprocess/fs.py)."""
    global _AUDITED
    if _AUDITED is None:
        from . import fs

        _AUDITED = {c for c in _codes(fs) if c.co_name in ("add_entry", "remove_entry")}
    return _AUDITED


def _codes(module) -> list[types.CodeType]:
    found, todo = [], [c for c in vars(module).values() if isinstance(c, types.FunctionType)]
    seen = set()
    while todo:
        obj = todo.pop()
        code = obj if isinstance(obj, types.CodeType) else getattr(obj, "__code__", None)
        if code is None or code in seen or code.co_filename != module.__file__:
            continue
        seen.add(code)
        found.append(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def _covering(table: list, offset: int):
    for entry in table:
        if entry.start <= offset < entry.end:
            return entry
    return None


def _frame_lets_through(f: types.FrameType, kill: type[BaseException]) -> bool:
    info = _code_info(f.f_code)
    if info is None:
        return False  # code this cannot read: the kill may run anything on its way out
    table, instructions, index = info
    offset = f.f_lasti
    for _ in range(32):  # nested handlers: each re-raises into the next
        entry = _covering(table, offset)
        if entry is None:
            return True  # out of this frame, into its caller
        offset = _handler(f, entry, kill, instructions, index)
        if offset is None:
            return False
    return False


def _handler(f, entry, kill, instructions, index) -> int | None:
    """Follow the handler at `entry.target`; the offset of the RERAISE it ends in (the
    kill going on), or None where it might do anything else."""
    n = index.get(entry.target)
    if n is None:
        return None
    ops = [i.opname for i in instructions[n:n + 4]]
    if ops[:3] == ["COPY", "POP_EXCEPT", "RERAISE"]:
        return instructions[n + 2].offset  # the compiler's cleanup: pops, re-raises
    if ops[:4] == ["LOAD_CONST", "STORE_FAST", "DELETE_FAST", "RERAISE"] \
            and instructions[n].argval is None:
        return instructions[n + 3].offset  # the `del e` of `except ... as e`, re-raising
    if ops[0] != "PUSH_EXC_INFO":
        return None
    n += 1
    if instructions[n].opname == "WITH_EXCEPT_START":
        if not _opened_file(f, entry, instructions, index):
            return None
        # a file's __exit__ returns None: the jump not taken, RERAISE 2
        if instructions[n + 1].opname.startswith("POP_JUMP") and \
                instructions[n + 2].opname == "RERAISE":
            return instructions[n + 2].offset
        return None
    # a chain of `except` clauses, or a `finally` body
    while True:
        stack: list[Any] = []
        m = n
        while m < len(instructions) and instructions[m].opname in _LOADS:
            if not _load(f, instructions[m], stack):
                return None
            m += 1
        ins = instructions[m]
        if ins.opname == "CHECK_EXC_MATCH":
            if len(stack) != 1 or _matches(stack[0], kill) is not False:
                return None  # it catches the kill, or cannot be read
            jump = instructions[m + 1]
            if not (jump.opname.startswith("POP_JUMP") and "IF_FALSE" in jump.opname):
                return None
            n = index[jump.argval]
            continue
        return _finally_body(f, instructions, n)


_LOADS = {"LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "LOAD_CONST", "BUILD_TUPLE",
          "LOAD_FAST", "LOAD_DEREF"}


def _load(f, ins, stack: list) -> bool:
    """Push what `ins` would load, read without running code; False where that can't be."""
    op = ins.opname
    if op == "LOAD_GLOBAL":
        if ins.arg & 1:
            stack.append(None)  # the NULL before a callable
        name = ins.argval
        if name in f.f_globals:
            stack.append(f.f_globals[name])
        elif name in f.f_builtins:
            stack.append(f.f_builtins[name])
        else:
            return False
    elif op in ("LOAD_ATTR", "LOAD_METHOD"):  # LOAD_METHOD: `VAR.set(...)` where VAR is
        if not stack:                          # not a name bound by an import (3.11)
            return False
        owner = stack.pop()
        value = _attribute(owner, ins.argval)
        if value is _Refuse:
            return False
        if op == "LOAD_ATTR":
            stack.append(value)
            return True
        # a method of its class: the function, then `self`; else NULL, then the value
        method = not isinstance(owner, types.ModuleType) and isinstance(
            value, (types.FunctionType, types.MethodDescriptorType)) and ins.argval not in (
            getattr(owner, "__dict__", None) or {})
        stack.extend([value, owner] if method else [None, value])
    elif op == "LOAD_CONST":
        stack.append(ins.argval)
    elif op == "BUILD_TUPLE":
        count = ins.arg
        if len(stack) < count:
            return False
        items = tuple(stack[len(stack) - count:])
        del stack[len(stack) - count:]
        stack.append(items)
    elif op in ("LOAD_FAST", "LOAD_DEREF"):
        # A local's value is never read: `frame.f_locals` on 3.11 snapshots the locals
        # into a dict that then keeps them alive (an asyncio agent's sweep hung on it). A
        # local is an argument here, never a callee or an exception class.
        stack.append(_Local)
    else:
        return False
    return True


# C types whose attribute lookup is the generic one (their `tp_getattro` is
# PyObject_GenericGetAttr, Python/context.c), though their `__getattribute__` is a slot
# wrapper of their own, not `object`'s
_GENERIC = (contextvars.ContextVar,)
_FORWARDING: set | None = None


def _forwarding() -> set:
    """Classes whose lookup is the generic one but whose reads may still run code:
    pyfakefs's open files, whose `__getattribute__` faultsim replaced by forwarding
    descriptors (fs._direct_wrapper_lookup); refused as before, when theirs ran on every
    read."""
    global _FORWARDING
    if _FORWARDING is None:
        from . import fs  # when first needed, as `_audited` does

        _FORWARDING = fs.FORWARDING
    return _FORWARDING


def _attribute(owner: Any, name: str) -> Any:
    """`owner.name` where reading it runs no code: a module's global, or a value in an
    instance's own `__dict__` (no `__getattribute__` override, no data descriptor of that
    name on its class). `_Refuse` otherwise."""
    if owner is _Local or owner is _Refuse:
        return _Refuse
    if isinstance(owner, types.ModuleType):
        return owner.__dict__.get(name, _Refuse) if type(owner) is types.ModuleType \
            else _Refuse
    cls = type(owner)
    if cls.__getattribute__ is not object.__getattribute__ and cls not in _GENERIC \
            or cls in _forwarding():
        return _Refuse
    found = _Refuse
    for klass in cls.__mro__:
        if name in klass.__dict__:
            found = klass.__dict__[name]
            if hasattr(type(found), "__set__"):
                return _Refuse  # a data descriptor (a property) runs code
            break
    own = getattr(owner, "__dict__", None)
    if isinstance(own, dict) and name in own:
        return own[name]
    # a method of its class (`fd_os.close`: pyfakefs's `os` is an instance; `var.set`):
    # binding a Python function or a C method runs no code, and only its identity is used
    # (a known callee, an opener, never an exception class)
    if isinstance(found, (types.FunctionType, types.MethodDescriptorType)):
        return found
    return _Refuse


def _matches(value: Any, kill: type[BaseException]) -> bool | None:
    """Would `except value:` catch `kill`? None where it might raise instead (not a class)."""
    classes = value if isinstance(value, tuple) else (value,)
    for cls in classes:
        if not isinstance(cls, type) or not issubclass(cls, BaseException):
            return None
        if cls in kill.__mro__:
            return True
    return False


def _finally_body(f, instructions, n: int) -> int | None:
    """A `finally` body: straight-line calls of known cleanup, then RERAISE."""
    stack: list[Any] = []
    for ins in instructions[n:n + 64]:
        op = ins.opname
        if op in _LOADS:
            if not _load(f, ins, stack):
                return None
        elif op in ("PRECALL", "NOP"):
            pass
        elif op == "CALL":
            count = ins.arg
            if len(stack) < count + 2:
                return None
            if not _cleanup(_callee(stack, count)):
                return None
            del stack[len(stack) - count - 2:]
            stack.append(_Refuse)
        elif op == "POP_TOP":
            if not stack:
                return None
            stack.pop()
        elif op == "RERAISE":
            return ins.offset
        else:
            return None
    return None


def _callee(stack: list, count: int) -> Any:
    """What a CALL of `count` arguments calls: below them NULL + a callable, or a method +
    its `self` (LOAD_METHOD's two shapes, 3.11)."""
    first, second = stack[len(stack) - count - 2], stack[len(stack) - count - 1]
    return second if first is None else first


def _func(obj: Any) -> Any:
    return getattr(obj, "__func__", obj)


def _known() -> tuple[set, set]:
    """The callables known to close and do nothing else (cleanup), and the openers whose
    file's `__exit__` closes it: the real ones and pyfakefs's (read under pyfakefs, `io`,
    `os` and `pathlib` are its fake modules: a set read from them alone would not know the
    real `open`). Cleanup also holds `ContextVar.set`, the `finally: VAR.set(previous)` of
    code that sets a context variable for a call: C code that stores a value, runs no
    Python code, touches no file and cannot raise (unlike `reset`, which raises on a token
    of another context)."""
    import _io
    import os
    import pathlib

    # under pyfakefs, the real modules are its fake modules' `os_module`, `pathlib_module`
    real_os = getattr(os, "os_module", os)
    real_pathlib = getattr(pathlib, "pathlib_module", pathlib)
    cleanup: set = {posix.close, real_os.close, contextvars.ContextVar.set}
    openers: set = {_io.open, real_os.fdopen, real_pathlib.Path.open}  # _io.open: open()
    try:
        from pyfakefs.fake_io import FakeIoModule
        from pyfakefs.fake_os import FakeOsModule
        from pyfakefs.fake_pathlib import FakePath

        cleanup.add(FakeOsModule.close)
        openers |= {FakeIoModule.open, FakeOsModule.fdopen, FakePath.open}
    except ImportError:  # pragma: no cover - pyfakefs is a core dependency
        pass
    return cleanup, openers


_KNOWN: tuple[set, set] = _known()


def _cleanup(callee: Any) -> bool:
    try:
        return _func(callee) in _KNOWN[0]
    except TypeError:  # unhashable
        return False


# what an opener's argument expression pops, each pushing one value (3.11's stack effects)
_ARGUMENT_OPS = {
    "BINARY_OP": lambda ins: 2,  # path + ".tmp", a / "b"
    "FORMAT_VALUE": lambda ins: 2 if ins.arg & 0x04 else 1,  # an f-string's {x} (:spec)
    "BUILD_STRING": lambda ins: ins.arg,  # the f-string's parts joined
}


def _opened_file(f, entry, instructions, index) -> bool:
    """The `with` whose body `entry` covers manages a file from a known opener, called in
    the `with` statement itself: `with open(...) as f:`, `with p.open(...) as f:`."""
    # the body's range may be split around handlers inside it: the with's own starts
    # right after its BEFORE_WITH, at the lowest offset of the ranges sent to this target
    start = min(e.start for e in _code_info(f.f_code)[0] if e.target == entry.target)
    n = index.get(start)
    if n is None or n < 2 or instructions[n - 1].opname != "BEFORE_WITH":
        return False
    before = n - 1
    line_start = before
    while line_start > 0 and instructions[line_start].starts_line is None:
        line_start -= 1
    stack: list[Any] = []
    for ins in instructions[line_start:before]:
        op = ins.opname
        # The opener's arguments (`open(self.path + ".tmp", "w")`) were computed when the
        # statement ran, before the kill: what they hold does not change what the file's
        # `__exit__` does, so a value built from a local stays a local's (never a callee).
        if op == "LOAD_ATTR" and stack and stack[-1] is _Local:
            continue
        if op in _ARGUMENT_OPS:
            taken = _ARGUMENT_OPS[op](ins)
            if len(stack) < taken:
                return False
            del stack[len(stack) - taken:]
            stack.append(_Local)
        elif op in _LOADS:
            if not _load(f, ins, stack):
                return False
        elif op == "PRECALL":
            pass
        elif op == "CALL":
            count = ins.arg
            if len(stack) < count + 2:
                return False
            callee = _callee(stack, count)
            del stack[len(stack) - count - 2:]
            stack.append(("opened", callee))
        else:
            return False
    if not stack or not isinstance(stack[-1], tuple) or stack[-1][:1] != ("opened",):
        return False
    try:
        return _func(stack[-1][1]) in _KNOWN[1]
    except TypeError:
        return False


ENABLED = True  # tests turn it off to compare with the fork at every kill point
# kill points of this process's sweeps whose aftermath was read here, and those forked for
# it instead (tests/test_unwind.py; the report counts crash states: its `shortcuts`)
counts = {"read": 0, "forked": 0}
OFF = "off (faultsim.inprocess.unwind.ENABLED)"
NO_FRAME = "no frame to read: the kill is not raised in the agent's run"


def refusal_here(frame: types.FrameType) -> str | None:
    """`refusal` for a kill (trace.Killed) raised in `frame` of an incarnation's run. Only
    on an interpreter whose bytecode shapes this reads (cpython.KNOWN: CPython 3.11);
    elsewhere every point forks, and so does a point whose stack holds code with an opcode
    or an exception table this does not know (`_code_info`)."""
    if not ENABLED:
        return OFF
    if cpython.shapes() is None:
        return f"not read on this interpreter: {cpython.unknown()}"
    from .. import agent
    from ..core.trace import Killed

    return refusal(frame, Killed, agent.run_agent.__code__)


def decided(loud: str | None) -> bool:
    """The forking executor's decision at a point it would fork at only for the kill's
    aftermath: no child where the kill is read (`loud`, `refusal_here`'s, is None); counted
    in `counts` where the reader ran."""
    if ENABLED and cpython.shapes() is not None:
        counts["read" if loud is None else "forked"] += 1
    return loud is None
