"""The scenario format's rules beyond one key's type (`SECTIONS` holds those): they need a
whole table, a whole script or the whole file. Each rule yields the `Problem`s it finds in
the raw TOML data; the loader raises the first (`load._Reader.first`) and `faultsim
validate` reports them all, so a rule is written once, here.

A rule looks only at values of the right type (a wrong type is the table's problem,
reported on its own); the loader calls each rule once the keys it reads are well typed."""
from __future__ import annotations

from typing import Any, Iterator

from ..model.script import ON_ERROR
from ..interpose.netguard import parse_allowed
from ..world import RECEIVER_KINDS
from .types import MAIN_TAG, Problem

SERVICE_WITH_RECORDS = ("queryable", "readonly")
ALLOW_EXPECTED = "\"HOST:PORT\", e.g. \"127.0.0.1:6379\""
GLOB_EXPECTED = {"files": "a glob relative to the workdir",
                 "redis_keys": "a glob over Redis keys"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def turn_shape(turn: dict, at: str) -> Iterator[Problem]:
    """A turn answers with tool calls or with the final answer, never both."""
    if ("final" in turn) == ("tool_calls" in turn):
        yield Problem(at, "exactly one of 'tool_calls' or 'final'",
                      "both" if "final" in turn else "neither")


def final_is_last(turn: Any, position: int, count: int, at: str) -> Iterator[Problem]:
    """The final answer ends a script, or a part of it whose `follow_up` (what the user
    says next) the next turn answers; the last turn has no follow-up."""
    if not isinstance(turn, dict) or "final" not in turn:
        return
    if position != count - 1 and "follow_up" not in turn:
        yield Problem(at + ".final", "the final answer only in the last turn (or in a turn "
                      "with a follow_up, which the next turn answers)")
    if position == count - 1 and "follow_up" in turn:
        yield Problem(at + ".follow_up", "a follow_up only before the last turn (no turn "
                      "would answer it)")


GIVE_UP_EXPECTED = ('on_error = "give_up" with on_error_final, the model\'s last answer (and '
                    "on_error_final only with it)")


def turn_reactions(turn: dict, at: str) -> Iterator[Problem]:
    """A follow-up comes after a final answer; `on_error` (and a give-up's text) is about
    a turn's tool calls."""
    if "final" in turn:
        for key in ("on_error", "on_error_final"):
            if key in turn:
                yield Problem(f"{at}.{key}", f"{key} only on a turn of tool calls")
        return
    if "tool_calls" not in turn:
        return
    if "follow_up" in turn:
        yield Problem(f"{at}.follow_up", "a follow_up only on a final turn")
    on_error = turn.get("on_error")
    if on_error is not None and on_error not in ON_ERROR:
        return  # the key's own type problem
    if (on_error == "give_up") != ("on_error_final" in turn):
        yield Problem(at + (".on_error_final" if on_error == "give_up" else ".on_error"),
                      GIVE_UP_EXPECTED)


def ends_with_final(turns: list, where: str) -> Iterator[Problem]:
    """A script's last turn is its final answer."""
    if turns and isinstance(turns[-1], dict) and "tool_calls" in turns[-1] \
            and "final" not in turns[-1]:
        yield Problem(where, "a last turn with a 'final' answer")


def service_records(spec: dict, at: str) -> Iterator[Problem]:
    """Records are what a query finds: only queryable and readonly services have them."""
    kind = spec.get("kind")
    if spec.get("records") and isinstance(kind, str) and kind in RECEIVER_KINDS \
            and kind not in SERVICE_WITH_RECORDS:
        yield Problem(at + ".records", "records only on queryable or readonly services", kind)


def subagent_name(name: str, at: str) -> Iterator[Problem]:
    """The main script's tag names no sub-agent (tool-use ids carry the tag)."""
    if name == MAIN_TAG:
        yield Problem(at, f"a sub-agent name other than {MAIN_TAG!r} (the main script's tag)")


def distinct_tasks(data: dict) -> Iterator[Problem]:
    """The fake tells the scripts apart by their task: each is its own."""
    subs = data.get("subagents")
    if not isinstance(subs, dict):
        return
    tasks = [data.get("task")] + [s.get("task") for s in subs.values() if isinstance(s, dict)]
    tasks = [t for t in tasks if isinstance(t, str)]
    if len(set(tasks)) != len(tasks):
        yield Problem("subagents", "task texts distinct from each other and from 'task'")


def fault_script(tag: Any, at: str, scripts: dict[str, int]) -> Iterator[Problem]:
    """An API fault's `script` names the main script or a sub-agent."""
    if isinstance(tag, str) and tag.strip() and tag not in scripts:
        names = ", ".join(repr(t) for t in scripts if t != MAIN_TAG)
        yield Problem(at + ".script", "the name of a sub-agent"
                      + (f" ({names})" if names else " (this scenario has none)"), tag)


def fault_position(position: Any, at: str, turns: int) -> Iterator[Problem]:
    """An API fault's `at` is a turn position within its script."""
    if _is_int(position) and not 0 <= position < turns:
        yield Problem(at + ".at", f"a turn position 0..{turns - 1}", position)


def langgraph_graph(graph: Any, at: str) -> Iterator[Problem]:
    if isinstance(graph, str) and graph.strip() and ":" not in graph:
        yield Problem(at, "FILE.py:ATTR or MODULE:ATTR", graph)


def checkpoint_glob(key: str, glob: Any, at: str) -> Iterator[Problem]:
    """Checkpoint files are under the workdir: no absolute path, no `..`."""
    if isinstance(glob, str) and glob and (glob.startswith("/") or ".." in glob):
        yield Problem(at, GLOB_EXPECTED[key], glob)


def checkpoint_declared(table: dict, where: str, typed: dict) -> Iterator[Problem]:
    """A declared [checkpoint] names where the state is: some file or Redis key."""
    if not table.get("files") and not table.get("redis_keys") and \
            typed.get("files", True) and typed.get("redis_keys", True):
        yield Problem(f"{where}.files", "at least one glob (or redis_keys)", [])


def sandbox_allow(entry: Any, at: str) -> Iterator[Problem]:
    if isinstance(entry, str) and entry:
        try:
            parse_allowed(entry)
        except ValueError:
            yield Problem(at, ALLOW_EXPECTED, entry)
