"""`faultsim.effect`: route a function that acts on the outside world to the scenario's
service of that name while faultsim runs the agent; call it as written otherwise.

    @faultsim.effect("billing", key=lambda customer, cents, idempotency_key: idempotency_key)
    def charge_card(customer, cents, idempotency_key):
        return stripe.PaymentIntent.create(...)   # never reached under faultsim

Under faultsim (an incarnation is running in this process: `agent.current_env()`), a call
goes to `env.services[service]` instead of the body, between the `tool.start` and
`tool.end` marks that place the in-tool and after-effect kill points around it:

    keyed      receiver.submit(arguments, key=key(**arguments))    the idempotency key
    queryable  receiver.apply(key(**arguments), arguments)         the record id
    read-only  receiver.read(key(**arguments))                     the record id
    blind      receiver.send(arguments)                            no key

`arguments` are the call's arguments bound to the function's signature, defaults applied
(for a keyed service, less any argument that is the idempotency key itself).
The lookups a careful agent reconciles with are reachable the same way: `fn.lookup(key)`
(a keyed service's stored key, or None) and `fn.query(record_id)` (a queryable record, or
None); outside faultsim they call the `lookup=`/`query=` functions given to `effect`. An
async function stays awaitable. The LangGraph adapter's `effect` is this one.

Part of the contract layer: imports `agent` only.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from .agent import AgentEnv, current_env


@dataclass(frozen=True)
class Effect:
    """What `effect` recorded on a wrapped function (`fn.faultsim_effect`)."""

    service: str
    key: Callable[..., str] | None
    tool: str  # the name its marks carry: the function's, unless given


def effect(service: str, *, key: Callable[..., str] | None = None, tool: str | None = None,
           lookup: Callable[[str], Any] | None = None,
           query: Callable[[str], Any] | None = None) -> Callable:
    """Mark `fn` as acting on the scenario's `service` (see the module docstring).

    `key(**arguments)` gives the idempotency key (keyed services) or the record id
    (queryable and read-only ones); blind services take none. `tool` names the marks
    (default: the function's name). `lookup`/`query` are the real-world lookups, called
    outside faultsim by `fn.lookup(...)`/`fn.query(...)`."""
    if not isinstance(service, str) or not service:
        raise TypeError(f"faultsim.effect({service!r}): the service is the name of one of "
                        "the scenario's [services]")

    def wrap(fn: Callable) -> Callable:
        spec = Effect(service, key, tool or getattr(fn, "__name__", "effect"))
        signature = inspect.signature(fn)

        def routed(env: AgentEnv, args: tuple, kwargs: dict) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return act(env, spec, dict(bound.arguments))

        call = transparent(fn, current_env, routed)
        call.faultsim_effect = spec  # type: ignore[attr-defined]
        call.lookup = _lookup(spec, "lookup_key", lookup)  # type: ignore[attr-defined]
        call.query = _lookup(spec, "query", query)  # type: ignore[attr-defined]
        return call
    return wrap


def transparent(fn: Callable, current: Callable[[], Any],
                route: Callable[[Any, tuple, dict], Any]) -> Callable:
    """`fn` wrapped: called as written while `current()` is None, else `route(it, args,
    kwargs)` instead of its body; an async `fn` stays awaitable."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            ctx = current()
            return await fn(*args, **kwargs) if ctx is None else route(ctx, args, kwargs)

        return call_async

    @functools.wraps(fn)
    def call_sync(*args: Any, **kwargs: Any) -> Any:
        ctx = current()
        return fn(*args, **kwargs) if ctx is None else route(ctx, args, kwargs)

    return call_sync


def receiver_of(env: AgentEnv, spec: Effect) -> Any:
    receiver = env.services.get(spec.service)
    if receiver is None:
        raise KeyError(f"effect {spec.tool!r} acts on service {spec.service!r}, which the "
                       f"scenario does not define (it has: {', '.join(sorted(env.services))})")
    return receiver


def act(env: AgentEnv, spec: Effect, arguments: dict, *, end_mark: str = "tool.end") -> Any:
    """One routed call: the receiver's answer, between the tool marks."""
    receiver = receiver_of(env, spec)
    if receiver.kind != "blind" and spec.key is None:
        raise TypeError(f"effect {spec.tool!r}: service {spec.service!r} is "
                        f"{receiver.kind}; give effect(..., key=lambda **arguments: ...) for "
                        f"its {'idempotency key' if receiver.kind == 'keyed' else 'record id'}")
    mark = env.mark or (lambda *a, **k: None)
    mark("tool.start", tool=spec.tool)
    if receiver.kind == "keyed":
        key = spec.key(**arguments)
        # an argument that carries the key itself is the key, not a parameter of the
        # effect: a retry under the same key must send the same parameters
        params = {k: v for k, v in arguments.items() if not (isinstance(v, str) and v == key)}
        result = receiver.submit(params, key=key)
    elif receiver.kind == "blind":
        result = receiver.send(arguments)
    elif receiver.kind == "queryable":
        result = receiver.apply(spec.key(**arguments), arguments)
    else:
        result = receiver.read(spec.key(**arguments))
    mark(end_mark, tool=spec.tool)
    return result


def _lookup(spec: Effect, method: str, real: Callable[[str], Any] | None) -> Callable:
    def look(key: str) -> Any:
        env = current_env()
        if env is None:
            if real is None:
                raise TypeError(f"{spec.tool}.{'lookup' if method == 'lookup_key' else 'query'}"
                                f" outside faultsim: give effect(..., "
                                f"{'lookup' if method == 'lookup_key' else 'query'}=...)")
            return real(key)
        receiver = receiver_of(env, spec)
        if not hasattr(receiver, method):
            raise TypeError(f"{spec.tool}: service {spec.service!r} is {receiver.kind}: it "
                            f"has no {'stored keys' if method == 'lookup_key' else 'records'}"
                            " to look up")
        return getattr(receiver, method)(key)
    return look
