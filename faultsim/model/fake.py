"""A fake Claude served to the real `anthropic.Anthropic` client through a mock transport.

Agent code under test calls `client.messages.create(...)` exactly as in production; the
SDK builds, sends, retries and parses as it would against the API, and no socket opens.
`FakeClaude.handle` answers one request in steps: read it (`_read`: route, JSON, the
validator), find its script and turn (`_address`, by `placement`), then either the model's
reaction to a tool error (`_react`) or the scripted turn with its faults (`_answer`), built
and logged the same way (`_message`, `_response`, `_log`).

Part of the fake Claude (layer 2): may import the other modules of `model/`, `finality`
and (lazily) `trace`. Its pieces: `records` (what is logged), `placement` (which turn),
`schema` (whether a turn may answer), `usage` (tokens, prompt cache), `streaming` (the
event stream), `clients` (SDK clients wired to `handle`)."""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Mapping

import httpx2

from ..interpose import finality
from .clients import API_URL, FAKE_API_KEY  # noqa: F401  (imported from here by others)
from .clients import async_client, serving_new_clients, sync_client
from .placement import Unplaceable, errored_calls, place  # noqa: F401  (re-exported)
from .records import ABRIDGE_KEEP, ABRIDGE_TEXT, RequestRecord, abridge, text_of  # noqa: F401
from .schema import schema_mismatch, tool_choice_refusal  # noqa: F401
from .script import (ERROR_RETRIES, STOP_FAULTS, ApiFault, Script, Turn, stopped_content,
                     turn_content)
from .streaming import EventStream
from .usage import PromptCache, estimate_tokens  # noqa: F401
from .validate import InvalidRequest, Validator, supports_prefill

if TYPE_CHECKING:
    import anthropic

FAULT_RESPONSES = {
    "429": (429, "rate_limit_error", "Number of request tokens has exceeded your per-minute "
                                     "rate limit"),
    "529": (529, "overloaded_error", "Overloaded"),
    "500": (500, "api_error", "Internal server error"),
}


def error_response(status: int, kind: str, message: str, request_id: str,
                   headers: Mapping[str, str] | None = None) -> httpx2.Response:
    body = {"type": "error", "error": {"type": kind, "message": message},
            "request_id": request_id}
    return httpx2.Response(status, json=body,
                           headers={"request-id": request_id, **(headers or {})})


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
        self._prompt_cache = PromptCache()
        self._paused: set[str] = set()  # pause_turn answers: sent back, they continue the turn
        self.prefill_models = prefill_models
        self._validator = Validator()  # checks only what is new since the last request
        # called with each request before it is read (faultsim.inprocess.convergence: a
        # resumed run that reaches a state of the clean run is stopped here); None: nothing
        self.before_request: Callable[[httpx2.Request], None] | None = None


    # -- the client -------------------------------------------------------------------
    def client(self, *, max_retries: int = 2, **options: Any) -> "anthropic.Anthropic":
        """A real SDK client whose HTTP goes to this fake (no socket is ever opened)."""
        return sync_client(self.handle, max_retries=max_retries, **options)

    def async_client(self, *, max_retries: int = 2, **options: Any
                     ) -> "anthropic.AsyncAnthropic":
        """The same, for async code: an `anthropic.AsyncAnthropic` served by this fake."""
        return async_client(self.handle, max_retries=max_retries, **options)

    def serving_new_clients(self) -> ContextManager[None]:
        """While inside, an `anthropic.Anthropic` or `anthropic.AsyncAnthropic` the agent
        builds itself (no `http_client` of its own) is served by this fake too: its requests
        go through the same in-process transport, whatever its `base_url`, and it gets a
        fake API key when none is set, so no credentials are looked up and no socket is
        opened. (An async client left to build its own transport would also import
        httpcore2, which reads its package metadata: hidden by the fake file system.)"""
        return serving_new_clients(self.handle)

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
            from ..core.trace import WorldSealed
            finality.went_on("it asked the model")
            raise WorldSealed("a killed incarnation called the model")
        if self.before_request is not None:
            self.before_request(request)
        index = len(self.requests) + 1
        self._sent = None  # the conversation of this request, once validated
        request_id = f"req_faultsim_{index:05d}"
        read = self._read(request, request_id)
        if isinstance(read, httpx2.Response):
            return read
        body, messages = read
        addressed = self._address(body, messages, request_id)
        if isinstance(addressed, httpx2.Response):
            return addressed
        script, position = addressed
        reacted = self._react(body, messages, script, position, request, request_id)
        if reacted is not None:
            return reacted
        return self._answer(body, messages, script, position, request, request_id)

    def _read(self, request: httpx2.Request, request_id: str
              ) -> httpx2.Response | tuple[dict, list[dict]]:
        """The request's body and its conversation (consecutive turns of one role merged),
        or the response that ends it here: a wrong route, a body that is not JSON, one the
        API would refuse, or a token count (answered without a turn)."""
        path = request.url.path
        counting = path.endswith("/v1/messages/count_tokens")
        if request.method != "POST" or not (path.endswith("/v1/messages") or counting):
            return self._log(error_response(404, "not_found_error", f"faultsim fake serves "
                                            f"POST /v1/messages and /v1/messages/count_tokens "
                                            f"only, not {request.method} {path}", request_id),
                             None, None, 0)
        try:
            body = json.loads(request.content or b"null")
        except ValueError:
            return self._log(error_response(400, "invalid_request_error", "request body is "
                                            "not valid JSON", request_id), None, None, 0)
        try:
            # the API merges consecutive turns of one role; the script is addressed on that
            messages = self._validator.turns(body, count_tokens=counting)
            self._sent = messages
        except InvalidRequest as exc:
            return self._log(error_response(400, "invalid_request_error", exc.message,
                                            request_id), None, None, 0)
        if counting:  # no answer, no turn: the count the API would bill as input
            return httpx2.Response(200, json={"input_tokens":
                                              self._prompt_cache.input_tokens(body)[0]},
                                   headers={"request-id": request_id})
        return body, messages

    def _address(self, body: dict, messages: list[dict], request_id: str
                 ) -> httpx2.Response | tuple[Script, int]:
        """The script the first message names and the turn the conversation is at
        (`place`), or the script error when there is none to serve."""
        task = text_of(body["messages"][0]["content"])  # the first message as sent
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
        return script, position

    def _answer(self, body: dict, messages: list[dict], script: Script, position: int,
                request: httpx2.Request, request_id: str) -> httpx2.Response:
        """The scripted turn `position`, unless the request cannot have it (tool_choice,
        prefill), with the script's fault at this turn while it lasts."""
        turn = script.turns[position]
        refused = tool_choice_refusal(body, turn)
        if refused:
            return self._script_error(f"script {script.tag!r}, turn {position + 1}: {refused}",
                                      request_id, script, position)

        last = messages[-1]
        if last["role"] == "assistant":
            paused = json.dumps(last["content"], sort_keys=True) in self._paused
            if not paused and not supports_prefill(body["model"], self.prefill_models):
                return self._log(error_response(400, "invalid_request_error", "This model does "
                                                "not support assistant message prefill. The "
                                                "conversation must end with a user message.",
                                                request_id), script, position, 0)

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
        suffix = "" if repeat == 0 else f"_r{repeat + 1}"
        message_id = f"msg_{script.tag}_{position + 1:02d}{suffix}"
        message, usage, ids = self._message(body, message_id, content, stop_reason)
        streaming = bool(body.get("stream"))
        if not streaming and cut:
            # the body stops short: the client's read fails and the SDK retries, as it
            # does when a connection drops in production
            self._log(None, script, position, repeat, status=200, error="stream_cut",
                      message="the connection dropped mid-answer", stream=False)
            raise httpx2.RemoteProtocolError("peer closed connection without sending "
                                             "complete message body (incomplete chunked read)",
                                             request=request)
        response = self._response(message, request, request_id, streaming, bool(cut))
        if cut:
            return self._log(response, script, position, repeat, status=200,
                             error="stream_cut", message="the connection dropped mid-stream",
                             stream=True)
        return self._log(response, script, position, repeat, usage=usage, ids=ids,
                         stop=stop_reason, stream=streaming)

    def _react(self, body: Mapping, messages: list[dict], script: Script, position: int,
               request: httpx2.Request, request_id: str) -> httpx2.Response | None:
        """The model's answer when a call of the turn just answered came back an error
        (script.ON_ERROR): a retry of those calls with fresh ids, or the turn's give-up
        text; None when the script simply goes on. It depends only on the conversation,
        like every answer: a resumed agent that sends the same one gets the same reaction."""
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
            refused = tool_choice_refusal(body, retry)
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
        message_id = f"msg_{script.tag}_{q + 1:02d}_{reaction}{errors}"
        message, usage, ids = self._message(body, message_id, content, stop)
        response = self._response(message, request, request_id, bool(body.get("stream")))
        # logged at the turn the request asks for (it carries turn q's results), marked as
        # a reaction: no scripted turn was answered (again)
        return self._log(response, script, position, 0, usage=usage, ids=ids, stop=stop,
                         stream=bool(body.get("stream")), reaction=reaction)

    def _message(self, body: Mapping, message_id: str, content: list, stop: str
                 ) -> tuple[dict, dict, tuple[str, ...]]:
        """The answer as the API shapes it, its usage and its tool-use ids."""
        input_tokens, cache = self._prompt_cache.input_tokens(body)
        usage = {"input_tokens": input_tokens, "output_tokens": estimate_tokens(content),
                 **cache}
        message = {"id": message_id, "type": "message", "role": "assistant",
                   "model": body["model"], "content": content, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        return message, usage, tuple(b["id"] for b in content if b["type"] == "tool_use")

    def _response(self, message: dict, request: httpx2.Request, request_id: str,
                  streaming: bool, cut: bool = False) -> httpx2.Response:
        """`message` as JSON, or as server-sent events read as the client goes (`cut`: the
        connection drops mid-stream)."""
        headers = {"request-id": request_id}
        if not streaming:
            return httpx2.Response(200, json=message, headers=headers)
        return httpx2.Response(200, headers={**headers, "content-type": "text/event-stream",
                                             "cache-control": "no-cache"},
                               stream=EventStream(self._stream_event, message, request, cut))

    def _script_within(self, text: str) -> Script | None:
        """The script whose task the first message carries inside a longer text (a summary
        that restates the task, system reminders around it): the longest such task."""
        found = [t for t in self.scripts if t and t in text]
        return self.scripts[max(found, key=len)] if found else None

    def _stream_event(self, message: dict, where: str) -> None:
        finality.refuse_stray("read the model's stream")
        if self.sealed is not None and self.sealed():
            from ..core.trace import WorldSealed
            finality.went_on("it read the model's stream")
            raise WorldSealed("a killed incarnation read the model's stream")
        self._on_event("model.stream", message_id=message["id"], where=where)

    def _fault(self, fault: ApiFault, request: httpx2.Request, request_id: str,
               script: Script, position: int) -> httpx2.Response:
        if fault.kind == "timeout":
            self._log(None, script, position, 0, status=0, error="timeout",
                      message="request timed out")
            raise httpx2.ReadTimeout("faultsim: simulated read timeout", request=request)
        status, kind, text = FAULT_RESPONSES[fault.kind]
        # retry-after is what the real API sends; retry-after-ms wins in the SDK and keeps
        # its backoff in the millisecond range instead of real seconds of sleep.
        headers = {"retry-after": str(max(1, math.ceil(self.retry_after_ms / 1000))),
                   "retry-after-ms": str(self.retry_after_ms)}
        return self._log(error_response(status, kind, text, request_id, headers), script,
                         position, 0)

    def _script_error(self, text: str, request_id: str, script: Script | None,
                      position: int | None) -> httpx2.Response:
        # 400 with x-should-retry: false, so the SDK raises at once instead of retrying.
        return self._log(error_response(400, "faultsim_script_error", "faultsim: " + text,
                                        request_id, {"x-should-retry": "false"}),
                         script, position, 0)

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
