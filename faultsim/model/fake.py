"""A fake Claude served to the real `anthropic.Anthropic` client through a mock transport.

Agent code under test calls `client.messages.create(...)` exactly as in production; the
SDK builds, sends, retries and parses as it would against the API, and no socket opens.
"""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import httpx2

from .script import ApiFault, Script, turn_content
from .validate import InvalidRequest, validate_request

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

    @property
    def ok(self) -> bool:
        return self.status == 200


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict)
                   and b.get("type") == "text")


def position_of(messages: list[dict]) -> int:
    """The number of tool-result turns (user messages carrying tool results)."""
    return sum(1 for m in messages if m.get("role") == "user" and isinstance(m.get("content"), list)
               and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"]))


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

    Scripts are chosen by the text of the first user message (the task), so a parent task
    and its sub-agents can share one fake. Within a script the answer depends only on the
    position (tool-result turns already carried), so a resumed agent that sends the same
    conversation gets the same turn; a repeat is logged and gets fresh tool-use ids.
    """

    def __init__(self, scripts: Script | Iterable[Script], *, retry_after_ms: int = 1,
                 incarnation: Callable[[], int] = lambda: 0,
                 on_event: Callable[..., None] | None = None,
                 sealed: Callable[[], bool] | None = None) -> None:
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
        self._incarnation = incarnation
        self._on_event = on_event or _ignore
        self.sealed = sealed
        self._answered: dict[tuple[str, int], int] = {}
        self._faulted: dict[tuple[str, int], int] = {}

    # -- the client -------------------------------------------------------------------
    def client(self, *, max_retries: int = 2, **options: Any) -> "anthropic.Anthropic":
        """A real SDK client whose HTTP goes to this fake (no socket is ever opened)."""
        import anthropic

        return anthropic.Anthropic(
            api_key=FAKE_API_KEY, base_url=API_URL, max_retries=max_retries,
            http_client=httpx2.Client(transport=httpx2.MockTransport(self.handle)), **options)

    @contextmanager
    def serving_new_clients(self) -> Iterator[None]:
        """While inside, an `anthropic.Anthropic` the agent builds itself (no `http_client`
        of its own) is served by this fake too: its requests go through the same in-process
        transport, whatever its `base_url`, and it gets a fake API key when none is set, so
        no credentials are looked up and no socket is opened."""
        import os

        import anthropic

        cls = anthropic.Anthropic
        original = cls.__init__
        fake = self

        def __init__(client, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("http_client") is None:
                kwargs["http_client"] = httpx2.Client(
                    transport=httpx2.MockTransport(fake.handle))
                if kwargs.get("api_key") is None and not os.environ.get("ANTHROPIC_API_KEY"):
                    kwargs["api_key"] = FAKE_API_KEY
            original(client, *args, **kwargs)

        cls.__init__ = __init__
        try:
            yield
        finally:
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
        if self.sealed is not None and self.sealed():
            from ..trace import WorldSealed
            raise WorldSealed("a killed incarnation called the model")
        index = len(self.requests) + 1
        request_id = f"req_faultsim_{index:05d}"
        if request.method != "POST" or not request.url.path.endswith("/v1/messages"):
            return self._log(_error(404, "not_found_error", f"faultsim fake serves POST "
                                    f"/v1/messages only, not {request.method} "
                                    f"{request.url.path}", request_id), None, None, 0)
        try:
            body = json.loads(request.content or b"null")
        except ValueError:
            return self._log(_error(400, "invalid_request_error", "request body is not valid "
                                    "JSON", request_id), None, None, 0)
        try:
            validate_request(body)
        except InvalidRequest as exc:
            return self._log(_error(400, "invalid_request_error", exc.message, request_id),
                             None, None, 0)
        if body.get("stream"):
            return self._log(_error(400, "invalid_request_error", "faultsim's fake model "
                                    "does not serve streaming requests yet (stream=true)",
                                    request_id), None, None, 0)

        messages = body["messages"]
        task = _text_of(messages[0]["content"])
        script = self.scripts.get(task)
        if script is None:
            known = "; ".join(repr(t[:50]) for t in self.scripts) or "none"
            return self._script_error(f"no script for the task {task[:80]!r} "
                                      f"(scripts exist for: {known})", request_id, None, None)
        position = position_of(messages)
        if position >= len(script.turns):
            return self._script_error(
                f"script {script.tag!r} has {len(script.turns)} turns and ran out: the request "
                f"carries {position} tool-result turns and asks for turn {position + 1}",
                request_id, script, position)
        if script.turns[position - 1].is_final if position else False:
            return self._script_error(f"script {script.tag!r}: turn {position} was final, "
                                      "yet the conversation went on", request_id, script, position)

        fault = script.fault_at(position)
        slot = (script.tag, position)
        if fault is not None and self._faulted.get(slot, 0) < fault.times:
            self._faulted[slot] = self._faulted.get(slot, 0) + 1
            return self._fault(fault, request, request_id, script, position)

        repeat = self._answered.get(slot, 0)
        self._answered[slot] = repeat + 1
        content = turn_content(script, position, repeat)
        turn = script.turns[position]
        stop_reason = "end_turn" if turn.is_final else "tool_use"
        usage = {"input_tokens": estimate_tokens({k: body.get(k) for k in
                                                  ("system", "tools", "messages")}),
                 "output_tokens": estimate_tokens(content)}
        suffix = "" if repeat == 0 else f"_r{repeat + 1}"
        message = {"id": f"msg_{script.tag}_{position + 1:02d}{suffix}", "type": "message",
                   "role": "assistant", "model": body["model"], "content": content,
                   "stop_reason": stop_reason, "stop_sequence": None, "usage": usage}
        ids = tuple(b["id"] for b in content if b["type"] == "tool_use")
        return self._log(httpx2.Response(200, json=message, headers={"request-id": request_id}),
                         script, position, repeat, usage=usage, ids=ids, stop=stop_reason)

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
             error: str | None = None, message: str | None = None) -> httpx2.Response | None:
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
            stop_reason=stop)
        self.requests.append(record)
        # One event per answered request, once it is logged: a kill here means the API
        # answered and the client died before it could use the answer.
        self._on_event("model.response", record=record)
        return response
