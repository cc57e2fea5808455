"""Token accounting of the fake: a deterministic estimate (`estimate_tokens`) and the
prompt cache a request's `cache_control` breakpoints write and read (`PromptCache`).

Part of the fake Claude (layer 2): imports only the standard library."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping


def estimate_tokens(value: Any) -> int:
    """Deterministic token count: about four characters of canonical JSON per token."""
    return max(1, math.ceil(len(json.dumps(value, sort_keys=True, separators=(",", ":"))) / 4))


@dataclass
class PromptCache:
    """The prompt prefixes written to the (fake) prompt cache, per fake."""

    written: set[str] = field(default_factory=set)

    def input_tokens(self, body: Mapping) -> tuple[int, dict]:
        """Input tokens, and the cache fields when the request marks a cache breakpoint:
        the prefix up to the last `cache_control` is written to the cache the first time
        this fake sees it, and read from it afterwards (deterministic, per fake)."""
        total = estimate_tokens({k: body.get(k) for k in ("system", "tools", "messages")})
        prefix = _cached_prefix(body)
        if prefix is None:
            return total, {}
        cached = min(total - 1, estimate_tokens(prefix))
        key = json.dumps(prefix, sort_keys=True)
        seen = key in self.written
        self.written.add(key)
        return total - cached, {"cache_creation_input_tokens": 0 if seen else cached,
                                "cache_read_input_tokens": cached if seen else 0}


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
