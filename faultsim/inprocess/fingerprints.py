"""Fingerprints: what makes two states of an incarnation equal, read at a model request.
faultsim.inprocess.convergence cuts a resumed run where its state equals the clean run's
(and faultsim.inprocess.leads where it equals an earlier resumed run's); each key here is
a digest, and equal digests are taken as equal states, so each says what it reads:

- `files_key`: the sandbox, every file and folder byte for byte, with its mode and times;
- `world_key` (`world_parts`): what of the world a run can observe, and what decides the
  fake's answers still to come (why each part: convergence.py's argument);
- `request_key`: the request as the fake reads it (method, route, body);
- `state_key`: those three, and how many files the agent holds open;
- `fingerprint` (`read_memory`): the agent's memory;
- `horizon_key`: where a horizon cut may be made (--horizon: an assumption, not a proof;
  convergence.py, "The horizon").

Why reading the agent's memory this way is sound (the memory half of convergence.py's
argument). Read, as far as Python lets it be read: the frames on the stack from the
agent's `run()` to the request (code, position: `cpython.position`, and the locals the
rest of the frame can still read: `live_locals`) and the globals of the agent's own modules (outside the
standard library and site-packages), followed through every object they reach
(`fingerprint`). Frames and bytecode are read only on an interpreter cpython.py knows
(CPython 3.11): on another no run is cut (the run goes on to its end, as with
`convergence=False`), since what a frame holds and what its code reads changed between
versions. An object whose state cannot be read (a C object that is no known
value, an open file) refuses the cut. Plain lists and dicts are compared by value, not
by which of them are one object (the clean run built a value once, a resumed one read
it from two files): assumed, that an agent does not mutate one alias of such a value
and read the other. The SDK's client and faultsim's own objects (env, services, the
clock) are compared apart (the request, the world) or keep no state between requests.

Nothing is guessed: what cannot be read raises `Refused`, and the run is not cut there
(`read_memory` gives the reason the report counts). Neither are threads or a running
event loop read: with either, no fingerprint is taken (their state is not on the stack).
"""
from __future__ import annotations

import bisect
import contextvars
import datetime
import decimal
import enum
import fractions
import hashlib
import inspect
import logging
import os
import random
import re
import sys
import sysconfig
import threading
import types
import uuid
from itertools import chain
from typing import Any

from ..interpose import finality
from ..core.crashmodel import files_digest
from . import cpython
from ..pipeline.incarnation import stores_state
from ..errors import FaultsimError
from ..world.ledger import canonical


class Refused(FaultsimError):
    """The agent's memory holds what `fingerprint` cannot read: no cut here (caught in
    this module, by `read_memory`; it never leaves it)."""


_paths = sysconfig.get_paths()
_LIBRARIES = tuple(sorted({os.path.realpath(_paths[n]) + os.sep for n in
                           ("stdlib", "platstdlib", "purelib", "platlib") if _paths.get(n)}
                          | {os.path.abspath(_paths[n]) + os.sep for n in
                             ("stdlib", "platstdlib", "purelib", "platlib")
                             if _paths.get(n)}))
_FAULTSIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_ADAPTERS = _FAULTSIM + "adapters" + os.sep
# the SDK's plumbing: a client built afresh by each incarnation from env, keeping no state
# between requests that changes what it sends (its requests are compared as sent)
_PLUMBING = ("anthropic._client", "anthropic._base_client", "anthropic.resources",
             "anthropic.lib", "anthropic._streaming", "httpx", "httpx2", "httpcore",
             "httpcore2", "anyio", "h11", "ssl", "_ssl", "socket", "selectors")
_OPTIONS = "anthropic._models.FinalRequestOptions"  # one request's options, in the SDK's frames
# the SDK's modules whose frames on the stack at a model request are sending that request
_SENDING = frozenset({"anthropic._base_client"})
_VALUES = (datetime.datetime, datetime.date, datetime.time, datetime.timedelta,
           datetime.timezone, decimal.Decimal, fractions.Fraction, uuid.UUID, range,
           slice, complex, re.Pattern)
_LOCKS = (type(threading.Lock()), type(threading.RLock()))
_UNSET = object()  # a ContextVar without a value in the agent's context
_ASYNC = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
_SAFE_C_BASES = {object, dict, list, tuple, set, frozenset, str, int, float, bytes,
                 bytearray, BaseException}
LIMIT = 2_000_000  # tokens: a larger memory is not fingerprinted (no cut)


# Where code comes from, by its file name: asked for every function and class in the
# agent's memory, and `os.path.abspath` is pyfakefs's inside a run (a third of a
# fingerprint's time). An absolute name's answer cannot change (normalising it reads no
# file and no working directory); a relative one is worked out each time.
_SOURCES: dict[str, str] = {}


def _absolute(filename: str) -> str:
    path = _SOURCES.get(filename)
    if path is None:
        path = os.path.abspath(filename)
        if filename.startswith("/"):
            _SOURCES[filename] = path
    return path


def _own_code(filename: str) -> bool:
    """The agent's own code: not the standard library, site-packages or faultsim's
    harness (faultsim's adapters are agent code)."""
    path = _absolute(filename)
    if path.startswith(_FAULTSIM):
        return path.startswith(_ADAPTERS)
    return not filename.startswith("<") and not path.startswith(_LIBRARIES)


def _harness(filename: str) -> bool:
    path = _absolute(filename)
    return path.startswith(_FAULTSIM) and not path.startswith(_ADAPTERS)


class _Canon:
    """A canonical text of an object graph: equal texts for graphs no program can tell
    apart by their values (identity kept only as sharing within the graph)."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.memo: dict[int, int] = {}  # objects (not plain containers): sharing is kept
        self.path: dict[int, int] = {}  # plain containers being expanded (cycles)
        self.keep: list = []  # keeps visited objects alive: ids stay unique
        # adding a frame of the SDK's that is sending the request (`_SENDING`): its
        # options' json_data is that request's body, compared apart (`_instance`)
        self.sending = False

    def digest(self) -> str:
        return hashlib.blake2b("\x00".join(self.out).encode("utf-8", "surrogatepass"),
                               digest_size=16).hexdigest()

    def add(self, obj: Any, depth: int = 0) -> None:
        out = self.out
        if len(out) > LIMIT:
            raise Refused("the agent's memory is too large to compare")
        if depth > 400:
            raise Refused("the agent's memory is nested too deeply to compare")
        t = type(obj)
        if obj is None or t is bool or t is int or t is float:
            out.append(repr(obj))
            return
        if t is str:
            out.append(f"s{len(obj)}:{obj}")
            return
        if t is bytes:
            out.append(f"b{obj.hex()}")
            return
        if t is tuple:
            out.append(f"t{len(obj)}")
            for x in obj:
                self.add(x, depth + 1)
            return
        if t is list or t is dict:
            # Plain containers by value: whether two equal lists are one object depends on
            # where the data came from (built once in the clean run, read from two files by
            # a resumed one), not on what the agent will do. (Assumed: the agent does not
            # mutate one alias of such a value and read another.) A cycle is a back
            # reference to the container it passes through.
            on = self.path.get(id(obj))
            if on is not None:
                out.append(f"^{on}")
                return
            self.path[id(obj)] = depth
            # Strings and None, most of a conversation, are written here as `add` would
            # write them (the same text, the same limits checked first): a call saved per
            # leaf, two thirds of a fingerprint's calls.
            inline = depth < 400
            try:
                out.append(f"{'l' if t is list else 'd'}{len(obj)}")
                for x in obj if t is list else chain.from_iterable(obj.items()):
                    if inline and (type(x) is str or x is None):
                        if len(out) > LIMIT:
                            raise Refused("the agent's memory is too large to compare")
                        out.append("None" if x is None else f"s{len(x)}:{x}")
                    else:
                        self.add(x, depth + 1)
            finally:
                del self.path[id(obj)]
            return
        seen = self.memo.get(id(obj))
        if seen is not None:
            out.append(f"@{seen}")
            return
        self.memo[id(obj)] = len(self.memo)
        self.keep.append(obj)
        self._other(obj, t, depth)

    def _sub(self, obj: Any, depth: int) -> str:
        inner = _Canon()
        inner.memo, inner.keep, inner.path = self.memo, self.keep, self.path
        inner.sending = self.sending
        inner.add(obj, depth)
        return "\x01".join(inner.out)

    def _other(self, obj: Any, t: type, depth: int) -> None:
        out, name = self.out, f"{t.__module__}.{t.__qualname__}"
        module = t.__module__ or ""
        if isinstance(obj, types.ModuleType):
            out.append("m" + obj.__name__)
        elif isinstance(obj, type):
            out.append(f"c{obj.__module__}.{obj.__qualname__}")
            mod = sys.modules.get(obj.__module__)
            if mod is not None and _own_code(getattr(mod, "__file__", None) or "<"):
                # a class of the agent's own: its attributes are state (a class counter)
                self.add({k: v for k, v in vars(obj).items()
                          if not (k.startswith("__") and k.endswith("__"))}, depth + 1)
        elif isinstance(obj, types.FunctionType):
            out.append(f"f{obj.__module__}.{obj.__qualname__}")
            if _own_code(obj.__code__.co_filename):
                self.add(obj.__defaults__, depth + 1)
                self.add(obj.__kwdefaults__, depth + 1)
                self.add(tuple(_cell(c) for c in obj.__closure__ or ()), depth + 1)
        elif isinstance(obj, types.MethodType):
            out.append("M")
            self.add(obj.__func__, depth + 1)
            self.add(obj.__self__, depth + 1)
        elif isinstance(obj, (types.BuiltinFunctionType, types.MethodWrapperType,
                              types.WrapperDescriptorType, types.MethodDescriptorType)):
            out.append(f"B{getattr(obj, '__qualname__', name)}")
            owner = getattr(obj, "__self__", None)
            if owner is not None and not isinstance(owner, (types.ModuleType, type)):
                self.add(owner, depth + 1)
        elif isinstance(obj, (classmethod, staticmethod)):
            out.append(f"C{name}")
            self.add(obj.__func__, depth + 1)
        elif isinstance(obj, property):
            out.append("P")
            self.add((obj.fget, obj.fset, obj.fdel), depth + 1)
        elif isinstance(obj, _VALUES):
            out.append(f"v{name}:{obj!r}")
        elif isinstance(obj, enum.Enum):
            out.append(f"e{name}.{obj.name}")
        elif isinstance(obj, random.Random):
            out.append(f"R{obj.getstate()!r}")
        elif isinstance(obj, contextvars.ContextVar):
            # its state, to the agent's code, is its value in the agent's context: the one
            # this request runs in (fingerprints are taken in the agent's own thread)
            value = obj.get(_UNSET)
            out.append(f"V{obj.name}" + (":unset" if value is _UNSET else ""))
            if value is not _UNSET:
                self.add(value, depth + 1)
        elif isinstance(obj, _LOCKS):
            out.append(f"L{name}")
        elif isinstance(obj, os.PathLike) and module.startswith(("pathlib",
                                                                 "pyfakefs.fake_path")):
            out.append(f"p{os.fspath(obj)}")
        elif isinstance(obj, (set, frozenset)):
            out.append(f"S{name}{len(obj)}")
            out.extend(sorted(self._sub(x, depth + 1) for x in obj))
        elif isinstance(obj, (types.GeneratorType, types.CoroutineType,
                              types.AsyncGeneratorType)):
            frame = getattr(obj, "gi_frame", None) or getattr(obj, "cr_frame", None) or \
                getattr(obj, "ag_frame", None)
            code = obj.gi_code if hasattr(obj, "gi_code") else getattr(obj, "cr_code", None)
            out.append(f"g{getattr(code, 'co_filename', '')}:{getattr(code, 'co_name', '')}")
            if frame is not None:
                out.append(str(cpython.position(frame.f_code, frame.f_lasti)))
                self.add(_frame_state(frame), depth + 1)
        elif module.startswith(_PLUMBING) or (module.startswith("faultsim.") and
                                              not module.startswith("faultsim.adapters")):
            out.append(f"O{name}")  # the SDK's plumbing, faultsim's harness (compared apart)
        elif module.startswith("pyfakefs"):
            if "Wrapper" in t.__qualname__:  # an open file: its position, its buffer
                raise Refused(f"the agent holds an open file ({t.__qualname__})")
            out.append(f"O{name}")  # the fake os/pathlib modules that stand in for the real
        else:
            self._instance(obj, t, name, depth)

    def _instance(self, obj: Any, t: type, name: str, depth: int) -> None:
        for base in t.__mro__:
            if not base.__flags__ & (1 << 9) and base not in _SAFE_C_BASES and \
                    not issubclass(base, BaseException):  # Py_TPFLAGS_HEAPTYPE
                raise Refused(f"the agent holds a {name}, whose state faultsim cannot read")
        self.out.append(f"o{name}")
        if isinstance(obj, BaseException):
            self.add(obj.args, depth + 1)
        if isinstance(obj, dict):
            self.add(dict(obj), depth + 1)
        elif isinstance(obj, (list, tuple)):
            self.add(list(obj), depth + 1)
        elif isinstance(obj, (set, frozenset)):
            self.out.extend(sorted(self._sub(x, depth + 1) for x in obj))
        elif isinstance(obj, (str, bytes, int, float, bytearray)):
            self.out.append(repr(obj))
        state = getattr(obj, "__dict__", None)
        if state is not None:
            state = dict(state)
            if name == _OPTIONS:  # the header's uuid: see determinism.draws
                state.pop("idempotency_key", None)
                if self.sending:
                    # The request being sent: its json_data became the body the fake
                    # read, compared in `request_key`, and the SDK reads it again only
                    # to build the same body for a retry (a private copy, serialised by
                    # one function). Compared here as well, the conversation was read
                    # twice more than the agent's own frame reads it: 40 % of a
                    # fingerprint's text (support_tickets' resumed runs).
                    state.pop("json_data", None)
            elif isinstance(obj, logging.Logger):
                # a memo of isEnabledFor, filled as each level is first asked and emptied
                # whenever a level changes (setLevel, logging.disable): a function of the
                # levels, which are compared. A module-level logger reaches every logger of
                # the process (its `manager`), and a library's (httpx's, after each
                # response) is first asked during the first clean run: compared, the two
                # clean runs differed at their first request and no run was ever cut
                state.pop("_cache", None)
            self.add(state, depth + 1)
        for cls in t.__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__"):
                    self.add(getattr(obj, _mangle(cls, slot), _MISSING), depth + 1)


_MISSING = ("faultsim:unset",)


def _mangle(cls: type, slot: str) -> str:
    if slot.startswith("__") and not slot.endswith("__"):
        return f"_{cls.__name__.lstrip('_')}{slot}"
    return slot


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


# -- which locals the rest of a frame can read -----------------------------------------
# A local that no path from where a frame stands reads again (before writing it) cannot
# change what the frame does: `status` read at the top of run() and never again is not
# the frame's state any more. Backward dataflow over the bytecode (jumps, fall-through,
# the exception table's handlers), read only as cpython.py knows it: on an interpreter it
# does not list, for code with an opcode outside its version's set or an exception table
# that does not read as one, every local is kept (the whole frame: what this pass only
# narrows). Every local is kept too where the code names `locals`, `vars`, `eval`, `exec`
# or `dir`, and in a module or class body (its locals are a namespace any later name
# lookup reads); zero-argument `super()` reads the first argument from the frame, so in a
# function that can call it that argument is always kept.
_LIVE: dict = {}
_INTROSPECT = {"locals", "vars", "eval", "exec", "dir"}


def live_locals(code: Any, lasti: int) -> frozenset | None:
    """The names of the locals read again after the instruction at `lasti` (None: all)."""
    table = _LIVE.get(code)
    if table is None:
        table = _LIVE[code] = _liveness(code) or False
    if table is False:
        return None
    offsets, after = table
    n = bisect.bisect_right(offsets, lasti) - 1  # lasti may point into its caches
    return after[n] if n >= 0 else None


def _liveness(code: Any):
    known = cpython.shapes()
    ins = cpython.instructions(code)
    if known is None or ins is None or not code.co_flags & inspect.CO_OPTIMIZED:
        return None
    offsets = [i.offset for i in ins]
    index = {o: n for n, o in enumerate(offsets)}
    entries = cpython.exception_table(code, index)
    if entries is None:
        return None
    # zero-argument super() reads the frame's first argument itself
    always = frozenset(code.co_varnames[:1]) if "__class__" in code.co_freevars and \
        code.co_argcount else frozenset()
    uses: list = []
    defs: list = []
    for i in ins:
        op = i.opname
        # a cell is read by this code (LOAD_DEREF) and by the closures it makes after
        # LOAD_CLOSURE (those, once made, are values fingerprinted with their cells)
        if op in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF"):
            uses.append({i.argval}), defs.append(set())
        elif op in ("STORE_FAST", "STORE_DEREF"):
            uses.append(set()), defs.append({i.argval})
        elif op in ("DELETE_FAST", "DELETE_DEREF"):  # raises if unbound: that is read
            uses.append({i.argval}), defs.append({i.argval})
        elif "FAST" in op or (op in ("LOAD_GLOBAL", "LOAD_NAME") and
                              i.argval in _INTROSPECT):
            return None
        else:
            uses.append(set()), defs.append(set())
    succ: list = []
    for n, i in enumerate(ins):
        nxt = []
        if i.opname in known.jumps:
            nxt.append(index.get(i.argval))
        if i.opname not in known.stops and n + 1 < len(ins):
            nxt.append(n + 1)
        nxt += [index.get(e.target) for e in entries if e.start <= i.offset < e.end]
        if None in nxt:
            return None
        succ.append(nxt)
    live = [always] * len(ins)
    changed = True
    while changed:
        changed = False
        for n in range(len(ins) - 1, -1, -1):
            out = frozenset().union(*(live[m] for m in succ[n]))
            new = frozenset(uses[n]) | (out - defs[n]) | always
            if new != live[n]:
                live[n], changed = new, True
    return offsets, [frozenset().union(always, *(live[m] for m in succ[n]))
                     for n in range(len(ins))]


def _frame_state(frame: Any) -> dict:
    """A frame's locals and cells that its rest can read (bound or not), and its free
    variables."""
    code, values = frame.f_code, cpython.frame_locals(frame)
    if values is None:  # not a mapping this knows the meaning of (cpython.py)
        raise Refused(cpython.unknown() or f"a frame's locals are a "
                      f"{type(frame.f_locals).__name__} here, which faultsim does not read")
    live = live_locals(code, frame.f_lasti)
    if live is None:
        return dict(values)
    keep = live | set(code.co_freevars)  # shared with a frame that may not be seen
    return {name: values.get(name, _MISSING) for name in code.co_varnames + code.co_cellvars
            + code.co_freevars if name in keep}


def fingerprint(frame: Any, parts: dict | None = None) -> str:
    """The agent's memory as seen from `frame` (inside the fake's transport): its frames on
    the stack up to faultsim's call of the agent, and the globals of its own modules.
    `parts` (the diagnostic, faultsim.inprocess.diagnose): filled with a digest of each
    frame's and module's share of the text, by name."""
    canon, modules, frames = _Canon(), {}, []
    starts: list = []
    while frame is not None and frame.f_code.co_name != "run_incarnation":
        code = frame.f_code
        if code.co_flags & _ASYNC:
            raise Refused("the agent runs in an event loop (other tasks' state is not on "
                          "the stack)")
        if not _harness(code.co_filename):
            frames.append(frame)
            if _own_code(code.co_filename):
                modules.setdefault(id(frame.f_globals), frame.f_globals)
        frame = frame.f_back
    for i, f in enumerate(frames):  # innermost first (the digest's order)
        code = f.f_code
        starts.append((f"frame {len(frames) - 1 - i} {os.path.basename(code.co_filename)}:{code.co_name}",
                       len(canon.out)))
        # where it stands, read the same whether its call is specialised or not
        canon.out.append(f"F{code.co_filename}:{code.co_name}:{code.co_firstlineno}:"
                         f"{cpython.position(code, f.f_lasti)}")
        canon.sending = f.f_globals.get("__name__") in _SENDING
        canon.add(_frame_state(f))
    canon.sending = False
    for g in modules.values():
        starts.append((f"global {g.get('__name__')}", len(canon.out)))
        canon.out.append("G" + str(g.get("__name__")))
        canon.add({k: v for k, v in g.items() if not (k.startswith("__") and
                                                      k.endswith("__"))})
    if parts is not None:
        bounds = [n for _, n in starts] + [len(canon.out)]
        for (name, a), b in zip(starts, bounds[1:]):
            parts[name] = hashlib.blake2b("\x00".join(canon.out[a:b]).encode(
                "utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return canon.digest()


def file_meta(ip: Any) -> list[tuple[str, str]]:
    """Each path in the sandbox with its mode and times, in order."""
    meta: list[tuple[str, str]] = []

    def walk(directory, prefix):
        for name in sorted(directory.entries):
            entry = directory.entries[name]
            meta.append((f"{prefix}{name}",
                         f"{entry.st_mode}:{entry.st_mtime!r}:{entry.st_ctime!r}"))
            if hasattr(entry, "entries"):
                walk(entry, f"{prefix}{name}/")

    walk(ip.root_dir(), "")
    return meta


def files_key(ip: Any) -> str:
    """The sandbox as the agent can observe it: each path's bytes, and its mode and times."""
    snap = ip.snapshot()
    return files_digest(tuple(sorted(snap.items()))) + ":" + "\n".join(
        f"{path}:{meta}" for path, meta in file_meta(ip))


def world_parts(world: Any) -> list[tuple[str, str]]:
    """What of the world a run can observe (world_signature without the oracle's counts),
    plus what decides the fake's answers still to come: (part, its text), in order."""
    model = world.model
    # the request count is seen: each answer's request-id header numbers it
    return [("requests", str(len(model.requests))), ("clock", world.clock.now().isoformat()),
            ("answered", canonical(sorted(model._answered.items()))),
            ("faulted", canonical(sorted(model._faulted.items()))),
            ("paused", canonical(sorted(model._paused))),
            ("cache", canonical(sorted(model._prompt_cache.written))),
            *(("store", text) for text in stores_state(world))]


def world_key(world: Any) -> str:
    return "\n".join(text for _, text in world_parts(world))


def request_key(request: Any, body: bytes | None = None) -> str:
    """The request as the fake reads it: method, route, and its body (or `body`)."""
    body = request.content or b"" if body is None else body
    return hashlib.blake2b(request.method.encode() + b" " + request.url.path.encode()
                           + b"\n" + body, digest_size=16).hexdigest()


_REASKED_ID = re.compile(rb'(toolu_[^"\\\s]*?_\d{2,}_\d+)_r\d+')  # `_NN`: 3 digits past 99


def horizon_key(world: Any, request: Any) -> str:
    """Where a horizon cut may be made: the request, every effect applied so far (by
    any incarnation) and each service's state. Equal effects and services mean the clean
    remainder repeats nothing the crashed incarnation already did, nor misses what it did
    not: the remainder's effects are the ones still to do (without it, a re-asked turn
    equal to the clean run's was cut and the clean run's next effect, which the resumed
    run's own records would have skipped, was counted twice: a false alarm)."""
    effects = sorted(e.effect_id() for e in world.ledger.entries if e.applied)
    # a re-asked turn's fresh tool-use ids (model/script.py: `_rK`) read as the first
    # asking's: the conversation is otherwise the clean run's, and only the ids differ
    asked = request_key(request, _REASKED_ID.sub(rb"\1", request.content or b""))
    return hashlib.blake2b("\x00".join((asked, *effects,
                                        *stores_state(world))).encode(),
                           digest_size=16).hexdigest()


def open_files(ip: Any) -> int:
    return sum(1 for f in ip.fs.open_files if f)


def state_key(ex: Any, world: Any, request: Any) -> str:
    """The state a cut compares first (its memory apart, read only when this matches):
    the sandbox, the world, the request, and how many files the agent holds open."""
    return hashlib.blake2b("\x00".join((files_key(ex.interposer), world_key(world),
                                        request_key(request),
                                        str(open_files(ex.interposer)))).encode(),
                           digest_size=16).hexdigest()


def read_memory(frame: Any) -> tuple[str | None, str | None]:
    """The agent's memory seen from `frame` (its fingerprint), or None and why not."""
    unread = cpython.unknown()
    if unread is not None:  # its frames and bytecode are not read as known (cpython.py)
        return None, unread
    if finality.live_threads():
        return None, "the agent has threads alive (their state is not on the stack)"
    if _running_loop():
        return None, "the agent runs in an event loop (other tasks' state is not on the stack)"
    try:
        return fingerprint(frame), None
    except Refused as exc:
        return None, str(exc)


def _running_loop() -> bool:
    aio = sys.modules.get("asyncio")
    return aio is not None and aio._get_running_loop() is not None
