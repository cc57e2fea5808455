"""A fake Claude served to the real `anthropic.Anthropic` client through a mock transport.

Agent code under test calls `client.messages.create(...)` exactly as in production; the
SDK builds, sends, retries and parses as it would against the API, and no socket opens.
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import httpx2

from .. import finality
from .sse import events as stream_events
from .script import STOP_FAULTS, ApiFault, Script, stopped_content, turn_content
from .validate import InvalidRequest, Validator, supports_prefill

if TYPE_CHECKING:
    import anthropic

API_URL = "https://api.anthropic.com"
FAKE_API_KEY = "sk-ant-faultsim-fake"

_FAULT_RESPONSES = {
    "429": (429, "rate_limit_error", "Number of request tokens has exceeded your per-minute "
                                     "rate limit"),
    "529": (529, "overloaded_error", "Overloaded"),
    "500": (500, "api_error", "Internal server error"),
}


@dataclass(frozen=True)
class RequestRecord:
    """One request as the fake saw it; the oracle reads these later."""

    index: int
    incarnation: int
    script: str | None  # the script's tag, None when no script matched
    position: int | None  # how many tool-result turns the request carried
    repeat: int  # how many times this position had been answered before
    status: int
    error: str | None  # error type for non-200 answers
    message: str | None  # error message for non-200 answers
    input_tokens: int = 0
    output_tokens: int = 0
    tool_use_ids: tuple[str, ...] = ()
    stop_reason: str | None = None
    stream: bool = False  # answered as server-sent events
    # the conversation it sent, abridged (`abridge`): what a counterexample shows of a
    # resumed run's first request, beside the clean run's at that turn
    sent: tuple[str, ...] = field(default=(), compare=False)
    # "retry" / "give_up": the model's reaction to a tool's error result (`on_error`), a
    # new turn of its own rather than a scripted turn answered (again)
    reaction: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


ABRIDGE_KEEP = 4  # messages kept from the end of a conversation (and its first)
ABRIDGE_TEXT = 48  # characters of a text block shown


def _block(block: Any) -> str:
    if isinstance(block, str):
        block = {"type": "text", "text": block}
    if not isinstance(block, dict):
        return type(block).__name__
    kind = block.get("type", "?")
    if kind == "text":
        text = str(block.get("text", ""))
        return "text " + repr(text[:ABRIDGE_TEXT] + ("..." if len(text) > ABRIDGE_TEXT else ""))
    if kind == "tool_use":
        return f"tool_use {block.get('name')}"
    if kind == "tool_result":
        inner = block.get("content")
        text = _text_of(inner) if isinstance(inner, (str, list)) else ""
        return ("tool_result" + (" (error)" if block.get("is_error") else "") +
                (f" {text[:ABRIDGE_TEXT]!r}" if text else ""))
    return str(kind)


def abridge(messages: list[dict]) -> tuple[str, ...]:
    """A conversation as a counterexample shows it: a line per message (its role and each
    content block's type, text cut short), the first message and the last few only, so
    that recording it costs the same for the 200th request as for the first."""
    def line(m: dict) -> str:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [content]
        return f"{m.get('role')}: " + ", ".join(_block(b) for b in blocks)

    if len(messages) <= ABRIDGE_KEEP + 1:
        return tuple(line(m) for m in messages)
    left = len(messages) - 1 - ABRIDGE_KEEP
    return (line(messages[0]), f"... {left} message{'s' if left != 1 else ''} ...",
            *(line(m) for m in messages[-ABRIDGE_KEEP:]))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict)
                   and b.get("type") == "text")


def place(script: Script, messages: list[dict]) -> int:
    """Which scripted turn answers this conversation (0-based): the one after the last
    scripted turn whose every tool call has its result here. A call is found by its
    tool-use id (any repeat of the turn) or, for an id the fake did not give, by name and
    input. So a history rebuilt, merged, summarised or compacted is served the turn it is
    really at, whatever its shape. With no tool result at all: turn 1. Tool results that
    answer no call of the script cannot be placed (`Unplaceable`), rather than be served a
    turn by guesswork."""
    results: set = set()
    uses: list[dict] = []
    for m in messages:
        for b in (m.get("content") if isinstance(m.get("content"), list) else ()):
            if not isinstance(b, dict):
                continue
            if m.get("role") == "user" and b.get("type") == "tool_result":
                results.add(b.get("tool_use_id"))
            elif m.get("role") == "assistant" and b.get("type") == "tool_use":
                uses.append(b)
    opened = _followed_up(script, messages)
    if not results:
        return opened
    answered: set[tuple[int, int]] = set()
    foreign = []
    for rid in results:
        slot = _our_call(str(rid), script.tag)
        if slot is not None:
            answered.add(slot)
        else:
            foreign.append(rid)
    for block in uses:  # ids the agent or its framework made up: match name and input
        if block.get("id") not in foreign:
            continue
        for pos, turn in enumerate(script.turns):
            hit = next((i for i, c in enumerate(turn.tool_calls) if (pos, i) not in answered
                        and c.name == block.get("name") and c.input == block.get("input")),
                       None)
            if hit is not None:
                answered.add((pos, hit))
                break
    if not answered:
        raise Unplaceable(
            f"the request carries {len(results)} tool result(s), but none answers a call of "
            f"script {script.tag!r} (by tool-use id toolu_{script.tag}_NN_N, or by the name "
            f"and input of a scripted call): faultsim cannot tell which turn it is at")
    done = [pos for pos, turn in enumerate(script.turns) if turn.tool_calls
            and all((pos, i) in answered for i in range(len(turn.tool_calls)))]
    return max(max(done) + 1 if done else 0, opened)


def _followed_up(script: Script, messages: list[dict]) -> int:
    """The turn after the last final answer whose scripted follow-up a later user message
    carries (0: none): a follow-up opens the next part of the conversation."""
    said = [_text_of(m.get("content") or "") for m in messages[1:] if m.get("role") == "user"]
    opened = [pos + 1 for pos, turn in enumerate(script.turns) if turn.follow_up is not None
              and any(turn.follow_up in text for text in said)]
    return max(opened, default=0)


def errored_calls(script: Script, messages: list[dict], position: int
                  ) -> tuple[tuple[int, ...], int, bool]:
    """The calls of turn `position` whose result in the last user message is an error:
    (their indices, the most error results any of them has in the whole conversation,
    whether one of the last results says it was interrupted). Calls are found as `place`
    finds them: the fake's own tool-use id, else the name and input of the scripted call."""
    from .script import interrupted_text

    turn = script.turns[position]
    slot_of: dict[str, int] = {}
    for m in messages:
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if not isinstance(b, dict) or b.get("type") != "tool_use":
                continue
            ours = _our_call(str(b.get("id")), script.tag)
            if ours is not None:
                if ours[0] == position:
                    slot_of[str(b.get("id"))] = ours[1]
                continue
            hit = next((i for i, c in enumerate(turn.tool_calls)
                        if c.name == b.get("name") and c.input == b.get("input")), None)
            if hit is not None:
                slot_of[str(b.get("id"))] = hit
    errors: dict[int, int] = {}
    last: set[int] = set()
    interrupted = False
    for k, m in enumerate(messages):
        if m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        for b in m["content"]:
            if not isinstance(b, dict) or b.get("type") != "tool_result":
                continue
            call = slot_of.get(str(b.get("tool_use_id")))
            inner = b.get("content")
            text = _text_of(inner) if isinstance(inner, (str, list)) else ""
            cut = interrupted_text(text)
            if call is None or not (b.get("is_error") or cut):
                continue
            errors[call] = errors.get(call, 0) + 1
            if k == len(messages) - 1:
                last.add(call)
                interrupted = interrupted or cut
    return tuple(sorted(last)), max((errors[c] for c in last), default=0), interrupted


def _our_call(rid: str, tag: str) -> tuple[int, int] | None:
    """(turn, call) of a tool-use id this fake gave (`toolu_TAG_NN_I[_rK]`), else None.
    String operations, not a regex: a forked crash run would compile it anew each time."""
    prefix = f"toolu_{tag}_"
    if not rid.startswith(prefix):
        return None
    parts = rid[len(prefix):].split("_")
    if len(parts) not in (2, 3) or not (parts[0].isdigit() and parts[1].isdigit()) or \
            len(parts) == 3 and not (parts[2][:1] == "r" and parts[2][1:].isdigit()):
        return None
    return int(parts[0]) - 1, int(parts[1]) - 1


class Unplaceable(Exception):
    """A conversation that answers no call of its script: no turn can be chosen for it."""


def estimate_tokens(value: Any) -> int:
    """Deterministic token count: about four characters of canonical JSON per token."""
    return max(1, math.ceil(len(json.dumps(value, sort_keys=True, separators=(",", ":"))) / 4))


def _error(status: int, kind: str, message: str, request_id: str,
           headers: Mapping[str, str] | None = None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": kind, "message": message},
            "request_id": request_id}
    return httpx2.Response(status, json=body, headers={"request-id": request_id, **(headers or {})})


def _ignore(kind: str, **info: Any) -> None:
    pass


class FakeClaude:
    """A deterministic policy from conversation to response.

    Scripts are chosen by the text of the first user message (the task, or a longer text
    that contains it), so a parent task and its sub-agents can share one fake. Within a
    script the answer depends only on which scripted calls the conversation answers
    (`place`), so a resumed agent that sends the same conversation, in whatever shape,
    gets the same turn; a repeat is logged and gets fresh tool-use ids.
    """

    def __init__(self, scripts: Script | Iterable[Script], *, retry_after_ms: int = 1,
                 incarnation: Callable[[], int] = lambda: 0,
                 on_event: Callable[..., None] | None = None,
                 sealed: Callable[[], bool] | None = None,
                 prefill_models: tuple[str, ...] | None = None) -> None:
        scripts = [scripts] if isinstance(scripts, Script) else list(scripts)
        self.scripts: dict[str, Script] = {}
        for s in scripts:
            if s.task in self.scripts:
                raise ValueError(f"two scripts for the same task text: {s.task[:60]!r}")
            if any(other.tag == s.tag for other in self.scripts.values()):
                raise ValueError(f"two scripts with the same tag {s.tag!r}: their tool-use "
                                 "ids and repeat counts would collide")
            self.scripts[s.task] = s
        self.retry_after_ms = retry_after_ms
        self.requests: list[RequestRecord] = []
        self._sent: list | None = None  # the request being answered (handle, then _log)
        self._incarnation = incarnation
        self._on_event = on_event or _ignore
        self.sealed = sealed
        self._answered: dict[tuple[str, int], int] = {}
        self._faulted: dict[tuple[str, int], int] = {}
        self._cache: set[str] = set()  # prompt prefixes written to the (fake) prompt cache
        self._paused: set[str] = set()  # pause_turn answers: sent back, they continue the turn
        self.prefill_models = prefill_models
        self._validator = Validator()  # checks only what is new since the last request

    # -- the client -------------------------------------------------------------------
    def client(self, *, max_retries: int = 2, **options: Any) -> "anthropic.Anthropic":
        """A real SDK client whose HTTP goes to this fake (no socket is ever opened)."""
        import anthropic

        return anthropic.Anthropic(
            api_key=FAKE_API_KEY, base_url=API_URL, max_retries=max_retries,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self.handle)), **options)

    def async_client(self, *, max_retries: int = 2, **options: Any
                     ) -> "anthropic.AsyncAnthropic":
        """The same, for async code: an `anthropic.AsyncAnthropic` served by this fake."""
        import anthropic

        return _platform_known(anthropic.AsyncAnthropic(
            api_key=FAKE_API_KEY, base_url=API_URL, max_retries=max_retries,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle)),
            **options))

    @contextmanager
    def serving_new_clients(self) -> Iterator[None]:
        """While inside, an `anthropic.Anthropic` or `anthropic.AsyncAnthropic` the agent
        builds itself (no `http_client` of its own) is served by this fake too: its requests
        go through the same in-process transport, whatever its `base_url`, and it gets a
        fake API key when none is set, so no credentials are looked up and no socket is
        opened. (An async client left to build its own transport would also import
        httpcore2, which reads its package metadata: hidden by the fake file system.)"""
        import os

        import anthropic

        fake = self
        originals = {}

        def serve(cls, http_client, prepare=lambda client: client):
            original = originals[cls] = cls.__init__

            def __init__(client, *args: Any, **kwargs: Any) -> None:
                if kwargs.get("http_client") is None:
                    kwargs["http_client"] = http_client(
                        transport=httpx2.MockTransport(fake.handle))
                    if kwargs.get("api_key") is None and \
                            not os.environ.get("ANTHROPIC_API_KEY"):
                        kwargs["api_key"] = FAKE_API_KEY
                original(client, *args, **kwargs)
                prepare(client)

            cls.__init__ = __init__

        serve(anthropic.Anthropic, httpx2.Client)
        serve(anthropic.AsyncAnthropic, httpx2.AsyncClient, _platform_known)
        try:
            yield
        finally:
            for cls, original in originals.items():
                cls.__init__ = original

    # -- what happened ----------------------------------------------------------------
    @property
    def invalid_requests(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.error == "invalid_request_error"]

    @property
    def script_errors(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.error == "faultsim_script_error"]

    def repeated_requests(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.ok and r.repeat > 0]

    # -- the transport ----------------------------------------------------------------
    def handle(self, request: httpx2.Request) -> httpx2.Response:
        finality.refuse_stray("call the model")
        if self.sealed is not None and self.sealed():
            from ..trace import WorldSealed
            finality.went_on("it asked the model")
            raise WorldSealed("a killed incarnation called the model")
        index = len(self.requests) + 1
        self._sent = None  # the conversation of this request, once validated
        request_id = f"req_faultsim_{index:05d}"
        path = request.url.path
        counting = path.endswith("/v1/messages/count_tokens")
        if request.method != "POST" or not (path.endswith("/v1/messages") or counting):
            return self._log(_error(404, "not_found_error", f"faultsim fake serves POST "
                                    f"/v1/messages and /v1/messages/count_tokens only, not "
                                    f"{request.method} {path}", request_id), None, None, 0)
        try:
            body = json.loads(request.content or b"null")
        except ValueError:
            return self._log(_error(400, "invalid_request_error", "request body is not valid "
                                    "JSON", request_id), None, None, 0)
        try:
            # the API merges consecutive turns of one role; the script is addressed on that
            messages = self._validator.turns(body, count_tokens=counting)
            self._sent = messages
        except InvalidRequest as exc:
            return self._log(_error(400, "invalid_request_error", exc.message, request_id),
                             None, None, 0)
        if counting:  # no answer, no turn: the count the API would bill as input
            return httpx2.Response(200, json={"input_tokens": self._input_tokens(body)[0]},
                                   headers={"request-id": request_id})

        task = _text_of(body["messages"][0]["content"])  # the first message as sent
        script = self.scripts.get(task) or self._script_within(task)
        if script is None:
            known = "; ".join(repr(t[:50]) for t in self.scripts) or "none"
            return self._script_error(f"no script for the task {task[:80]!r} "
                                      f"(scripts exist for: {known})", request_id, None, None)
        try:
            position = place(script, messages)
        except Unplaceable as exc:
            return self._script_error(str(exc), request_id, script, None)
        if position >= len(script.turns):
            return self._script_error(
                f"script {script.tag!r} has {len(script.turns)} turns and ran out: the request "
                f"answers the calls of turn {position} and asks for turn {position + 1}",
                request_id, script, position)
        if script.turns[position - 1].is_final and \
                script.turns[position - 1].follow_up is None if position else False:
            return self._script_error(f"script {script.tag!r}: turn {position} was final, "
                                      "yet the conversation went on", request_id, script, position)

        reacted = self._react(body, messages, script, position, request, request_id)
        if reacted is not None:
            return reacted
        turn = script.turns[position]
        refused = _tool_choice_refusal(body, turn)
        if refused:
            return self._script_error(f"script {script.tag!r}, turn {position + 1}: {refused}",
                                      request_id, script, position)

        last = messages[-1]
        if last["role"] == "assistant":
            paused = json.dumps(last["content"], sort_keys=True) in self._paused
            if not paused and not supports_prefill(body["model"], self.prefill_models):
                return self._log(_error(400, "invalid_request_error", "This model does not "
                                        "support assistant message prefill. The conversation "
                                        "must end with a user message.", request_id),
                                 script, position, 0)

        fault = script.fault_at(position)
        slot = (script.tag, position)
        cut = stopped = None
        if fault is not None and self._faulted.get(slot, 0) < fault.times:
            self._faulted[slot] = self._faulted.get(slot, 0) + 1
            if fault.kind == "stream_cut":
                cut = True
            elif fault.kind in STOP_FAULTS:
                stopped = fault.kind
            else:
                return self._fault(fault, request, request_id, script, position)

        # A cut or early-stopped answer is not the turn: its retry or continuation gets the
        # same turn with the same ids.
        repeat = self._answered.get(slot, 0)
        if not cut and not stopped:
            self._answered[slot] = repeat + 1
        content = turn_content(script, position, repeat,
                               thinking=(body.get("thinking") or {}).get("type") == "enabled")
        stop_reason = "end_turn" if turn.is_final else "tool_use"
        if stopped:
            content, stop_reason = stopped_content(content, stopped), stopped
            if stopped == "pause_turn":
                self._paused.add(json.dumps(content, sort_keys=True))
        input_tokens, cache = self._input_tokens(body)
        usage = {"input_tokens": input_tokens, "output_tokens": estimate_tokens(content),
                 **cache}
        suffix = "" if repeat == 0 else f"_r{repeat + 1}"
        message = {"id": f"msg_{script.tag}_{position + 1:02d}{suffix}", "type": "message",
                   "role": "assistant", "model": body["model"], "content": content,
                   "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}
        ids = tuple(b["id"] for b in content if b["type"] == "tool_use")
        streaming = bool(body.get("stream"))
        headers = {"request-id": request_id}
        if not streaming and cut:
            # the body stops short: the client's read fails and the SDK retries, as it
            # does when a connection drops in production
            self._log(None, script, position, repeat, status=200, error="stream_cut",
                      message="the connection dropped mid-answer", stream=False)
            raise httpx2.RemoteProtocolError("peer closed connection without sending "
                                             "complete message body (incomplete chunked read)",
                                             request=request)
        if not streaming:
            return self._log(httpx2.Response(200, json=message, headers=headers),
                             script, position, repeat, usage=usage, ids=ids, stop=stop_reason)
        response = httpx2.Response(200, headers={**headers, "content-type": "text/event-stream",
                                                 "cache-control": "no-cache"},
                                   stream=_EventStream(self, message, request, cut))
        if cut:
            return self._log(response, script, position, repeat, status=200,
                             error="stream_cut", message="the connection dropped mid-stream",
                             stream=True)
        return self._log(response, script, position, repeat, usage=usage, ids=ids,
                         stop=stop_reason, stream=True)

    def _react(self, body: Mapping, messages: list[dict], script: Script, position: int,
               request: httpx2.Request, request_id: str) -> httpx2.Response | None:
        """The model's answer when a call of the turn just answered came back an error
        (script.ON_ERROR): a retry of those calls with fresh ids, or the turn's give-up
        text; None when the script simply goes on. It depends only on the conversation,
        like every answer: a resumed agent that sends the same one gets the same reaction."""
        from .script import ERROR_RETRIES, Turn

        if position == 0 or messages[-1].get("role") != "user":
            return None
        q = position - 1
        turn = script.turns[q]
        if not turn.tool_calls:
            return None
        calls, errors, interrupted = errored_calls(script, messages, q)
        reaction = turn.reaction(interrupted) if calls else "continue"
        if reaction == "continue" or reaction == "retry" and errors > ERROR_RETRIES:
            return None
        slot = (script.tag, q)
        repeat = self._answered.get(slot, 0)
        thinking = (body.get("thinking") or {}).get("type") == "enabled"
        if reaction == "retry":
            retry = Turn(tool_calls=tuple(turn.tool_calls[i] for i in calls))
            refused = _tool_choice_refusal(body, retry)
            if refused:
                return self._script_error(f"script {script.tag!r}, the retry of turn {q + 1}: "
                                          f"{refused}", request_id, script, q)
            self._answered[slot] = repeat + 1  # its ids are new: later repeats count on
            content = turn_content(script, q, repeat, thinking=thinking, only=calls)
            stop = "tool_use"
        else:
            content = turn_content(script, q, repeat, thinking=thinking,
                                   final=turn.on_error_final)
            stop = "end_turn"
        input_tokens, cache = self._input_tokens(body)
        usage = {"input_tokens": input_tokens, "output_tokens": estimate_tokens(content),
                 **cache}
        message = {"id": f"msg_{script.tag}_{q + 1:02d}_{reaction}{errors}", "type": "message",
                   "role": "assistant", "model": body["model"], "content": content,
                   "stop_reason": stop, "stop_sequence": None, "usage": usage}
        ids = tuple(b["id"] for b in content if b["type"] == "tool_use")
        headers = {"request-id": request_id}
        if body.get("stream"):
            response = httpx2.Response(200, headers={**headers,
                                                     "content-type": "text/event-stream",
                                                     "cache-control": "no-cache"},
                                       stream=_EventStream(self, message, request, False))
        else:
            response = httpx2.Response(200, json=message, headers=headers)
        # logged at the turn the request asks for (it carries turn q's results), marked as
        # a reaction: no scripted turn was answered (again)
        return self._log(response, script, position, 0, usage=usage, ids=ids, stop=stop,
                         stream=bool(body.get("stream")), reaction=reaction)

    def _input_tokens(self, body: Mapping) -> tuple[int, dict]:
        """Input tokens, and the cache fields when the request marks a cache breakpoint:
        the prefix up to the last `cache_control` is written to the cache the first time
        this fake sees it, and read from it afterwards (deterministic, per fake)."""
        total = estimate_tokens({k: body.get(k) for k in ("system", "tools", "messages")})
        prefix = _cached_prefix(body)
        if prefix is None:
            return total, {}
        cached = min(total - 1, estimate_tokens(prefix))
        key = json.dumps(prefix, sort_keys=True)
        seen = key in self._cache
        self._cache.add(key)
        return total - cached, {"cache_creation_input_tokens": 0 if seen else cached,
                                "cache_read_input_tokens": cached if seen else 0}

    def _script_within(self, text: str) -> Script | None:
        """The script whose task the first message carries inside a longer text (a summary
        that restates the task, system reminders around it): the longest such task."""
        found = [t for t in self.scripts if t and t in text]
        return self.scripts[max(found, key=len)] if found else None

    def _stream_event(self, message: dict, where: str) -> None:
        finality.refuse_stray("read the model's stream")
        if self.sealed is not None and self.sealed():
            from ..trace import WorldSealed
            finality.went_on("it read the model's stream")
            raise WorldSealed("a killed incarnation read the model's stream")
        self._on_event("model.stream", message_id=message["id"], where=where)

    def _fault(self, fault: ApiFault, request: httpx2.Request, request_id: str,
               script: Script, position: int) -> httpx2.Response:
        if fault.kind == "timeout":
            self._log(None, script, position, 0, status=0, error="timeout",
                      message="request timed out")
            raise httpx2.ReadTimeout("faultsim: simulated read timeout", request=request)
        status, kind, text = _FAULT_RESPONSES[fault.kind]
        # retry-after is what the real API sends; retry-after-ms wins in the SDK and keeps
        # its backoff in the millisecond range instead of real seconds of sleep.
        headers = {"retry-after": str(max(1, math.ceil(self.retry_after_ms / 1000))),
                   "retry-after-ms": str(self.retry_after_ms)}
        return self._log(_error(status, kind, text, request_id, headers), script, position, 0)

    def _script_error(self, text: str, request_id: str, script: Script | None,
                      position: int | None) -> httpx2.Response:
        # 400 with x-should-retry: false, so the SDK raises at once instead of retrying.
        return self._log(_error(400, "faultsim_script_error", "faultsim: " + text, request_id,
                                {"x-should-retry": "false"}), script, position, 0)

    def _log(self, response: httpx2.Response | None, script: Script | None,
             position: int | None, repeat: int, *, usage: Mapping | None = None,
             ids: tuple[str, ...] = (), stop: str | None = None, status: int | None = None,
             error: str | None = None, message: str | None = None,
             stream: bool = False, reaction: str | None = None) -> httpx2.Response | None:
        if response is not None and response.status_code != 200:
            err = json.loads(response.content)["error"]
            error, message = err["type"], err["message"]
        record = RequestRecord(
            index=len(self.requests) + 1, incarnation=self._incarnation(),
            script=script.tag if script else None, position=position, repeat=repeat,
            status=response.status_code if response is not None else (status or 0),
            error=error, message=message,
            input_tokens=(usage or {}).get("input_tokens", 0),
            output_tokens=(usage or {}).get("output_tokens", 0), tool_use_ids=ids,
            stop_reason=stop, stream=stream,
            sent=abridge(self._sent) if self._sent is not None else (), reaction=reaction)
        self._sent = None
        self.requests.append(record)
        # One event per answered request, once it is logged: a kill here means the API
        # answered and the client died before it could use the answer.
        self._on_event("model.response", record=record)
        return response


def _platform_known(client: Any) -> Any:
    """An async SDK client looks its platform up in a worker thread on its first request.
    A forked crash run has no such thread, and `asyncio.run` then waits forever for it at
    exit: look it up now, in this thread (it is cheap off Windows)."""
    try:
        from anthropic._base_client import get_platform

        if getattr(client, "_platform", 0) is None:
            client._platform = get_platform()
    except ImportError:  # a later SDK without this attribute: nothing to pre-empt
        pass
    return client


def _cached_prefix(body: Mapping) -> list | None:
    """tools, system and messages up to the last block marked `cache_control`, or None."""
    parts: list = []
    last = None
    for name in ("tools", "system", "messages"):
        value = body.get(name)
        if value is None:
            continue
        items = [value] if isinstance(value, str) else list(value)
        for item in items:
            parts.append(item)
            blocks = item.get("content") if isinstance(item, dict) and "role" in item \
                else [item]
            if isinstance(blocks, list) and any(isinstance(b, dict) and b.get("cache_control")
                                                for b in blocks):
                last = len(parts)
    return None if last is None else parts[:last]


def _tool_choice_refusal(body: Mapping, turn: Any) -> str | None:
    """Why the scripted turn cannot be the answer to this request, if it cannot: the real
    model never calls a tool it was not offered, nor against `tool_choice`. Answering
    anyway would let a lenient agent pass without exercising a single effect."""
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type")
    offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    calls = [c.name for c in turn.tool_calls]
    if not calls:
        if kind in ("any", "tool"):
            return (f"the scripted turn is a final answer, but tool_choice "
                    f"{json.dumps(choice)} forces a tool call")
        return None
    if kind == "none":
        return (f"the scripted turn calls {', '.join(calls)}, but the request sets "
                'tool_choice {"type": "none"}')
    for name in calls:
        if name not in offered:
            return (f"the scripted turn calls {name!r}, a tool the request does not offer "
                    f"(it offers: {', '.join(sorted(n for n in offered if n)) or 'no tools'})")
    if kind == "tool" and calls != [choice.get("name")]:
        return (f"the scripted turn calls {', '.join(calls)}, but tool_choice forces "
                f"{choice.get('name')!r}")
    schemas = {t.get("name"): t.get("input_schema") for t in body.get("tools") or []
               if isinstance(t, dict)}
    for call in turn.tool_calls:
        wrong = schema_mismatch(schemas.get(call.name), call.input, "input")
        if wrong:
            return (f"the scripted call of {call.name!r} does not fit the input_schema the "
                    f"request offers it with: {wrong}")
    return None


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
               "null": type(None)}


def schema_mismatch(schema: Any, value: Any, where: str) -> str | None:
    """Where `value` breaks `schema`, for the JSON Schema keywords tool schemas use (type,
    properties, required, additionalProperties: false, items, enum); None when it fits or
    the schema says nothing checkable. A scripted input that no real model could send to
    this tool would exercise the agent's error path, not its effect."""
    if not isinstance(schema, dict):
        return None
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in names):
            return f"{where} is {json.dumps(value)}, not {' or '.join(names)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is {json.dumps(value)}, not one of {json.dumps(schema['enum'])}"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                return f"{where} lacks the required {name!r}"
        for name, item in value.items():
            if name in props:
                wrong = schema_mismatch(props[name], item, f"{where}.{name}")
                if wrong:
                    return wrong
            elif schema.get("additionalProperties") is False:
                return f"{where} has {name!r}, which the schema does not allow"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value):
            wrong = schema_mismatch(schema["items"], item, f"{where}[{k}]")
            if wrong:
                return wrong
    return None


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kind = _JSON_TYPES.get(name)
    return True if kind is None else isinstance(value, kind)


class _EventStream(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The answer as server-sent events, produced as the client reads them (sync or async
    clients alike). Some gaps are kill points: after `message_start`, after each content
    block, and in the middle of each tool input. A `stream_cut` fault drops the
    connection in the middle of the first tool input (else of the first block): the client
    sees what production shows, a read error after a 200."""

    def __init__(self, fake: "FakeClaude", message: dict, request: httpx2.Request,
                 cut: bool) -> None:
        self.fake, self.message, self.request, self.cut = fake, message, request, cut

    def _steps(self) -> Iterator[bytes]:
        steps = list(stream_events(self.message))
        cut_at = _cut_point(steps) if self.cut else None
        for n, step in enumerate(steps):
            if cut_at is not None and n == cut_at:
                raise httpx2.RemoteProtocolError(
                    "peer closed connection without sending complete message body "
                    "(incomplete chunked read)", request=self.request)
            yield step.encode()
            if _is_kill_gap(steps, n):
                self.fake._stream_event(self.message, step.where)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._steps()

    async def __aiter__(self):
        for chunk in self._steps():
            yield chunk


def _is_kill_gap(steps: list, n: int) -> bool:
    step = steps[n]
    if step.event in ("message_start", "content_block_stop"):
        return True
    if step.event == "content_block_delta" and step.data["delta"]["type"] == "input_json_delta":
        return step.deltas > 2 and step.delta == (step.deltas + 1) // 2  # mid tool input
    return False


def _cut_point(steps: list) -> int:
    """The index of the first event the client never gets."""
    deltas = [n for n, s in enumerate(steps) if s.event == "content_block_delta"]
    tools = [n for n in deltas if steps[n].data["delta"]["type"] == "input_json_delta"]
    chosen = tools or deltas
    if chosen:
        block = steps[chosen[0]].data["index"]
        mine = [n for n in chosen if steps[n].data["index"] == block]
        return mine[len(mine) // 2] if len(mine) > 1 else mine[0] + 1
    return 2  # after message_start and ping
