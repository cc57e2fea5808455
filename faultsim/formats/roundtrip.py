"""The round-trip property a checkpoint format owes its users: load -> (migrate) -> save is
lossless and idempotent, for every version on record. faultsim offers it for your own
format: give it your `load(bytes)` and `save(obj) -> bytes`, and documents to start from.

    from hypothesis import given
    from faultsim.formats.roundtrip import assert_round_trip, corpus_documents, documents

    @given(documents(corpus_documents("tests/corpora/v1", "tests/corpora/v2")))
    def test_round_trip(doc):
        assert_round_trip(my_format.loads, my_format.dumps, doc)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

FREE_TEXT = ("text", "content", "task")  # keys whose string values are the user's words
COUNTS = ("turns", "tokensUsed")  # keys whose integer values are counters


def corpus_documents(*corpora: str | Path, name: str = "checkpoint.json") -> list[bytes]:
    """Every distinct `name` file stored in the corpora, oldest format first as recorded."""
    from .corpus import Corpus

    seen: dict[str, bytes] = {}
    for folder in corpora:
        corpus = Corpus.open(folder)
        for entry in corpus.entries:
            for path, digest in entry.files.items():
                if digest and path.rsplit("/", 1)[-1] == name and digest not in seen:
                    data = corpus.blob(digest)
                    try:
                        json.loads(data)
                    except ValueError:
                        continue  # a torn temp file renamed nowhere: not a document
                    seen[digest] = data
    if not seen:
        raise ValueError(f"no whole {name} in {', '.join(map(str, corpora))}")
    return list(seen.values())


def documents(samples: Sequence[bytes], free_text: Sequence[str] = FREE_TEXT,
              counts: Sequence[str] = COUNTS):
    """A hypothesis strategy: one of `samples`, with the strings under `free_text` keys and
    the integers under `counts` keys drawn anew (any Unicode, large counts), so the
    property meets what real conversations hold, not only what the recording run wrote."""
    from hypothesis import strategies as st

    texts = st.text(max_size=40)
    numbers = st.integers(0, 2 ** 53)

    def vary(value: Any, key: str | None, draw) -> Any:
        if isinstance(value, dict):
            return {k: vary(v, k, draw) for k, v in value.items()}
        if isinstance(value, list):
            return [vary(v, key, draw) for v in value]
        if isinstance(value, str) and key in free_text:
            return draw(texts)
        if isinstance(value, int) and not isinstance(value, bool) and key in counts:
            return draw(numbers)
        return value

    @st.composite
    def build(draw):
        doc = json.loads(draw(st.sampled_from(list(samples))))
        return json.dumps(vary(doc, None, draw), ensure_ascii=False).encode()

    return build()


def assert_round_trip(load: Callable[[bytes], Any], save: Callable[[Any], bytes],
                      document: bytes) -> None:
    """load(save(load(d))) == load(d) (lossless), and save is a fixed point after one trip
    (idempotent: a migrated file, saved and loaded again, saves to the same bytes)."""
    __tracebackhide__ = True
    first = load(document)
    saved = save(first)
    again = load(saved)
    if again != first:
        raise AssertionError(f"not lossless: loading what save() wrote gives {_short(again)}, "
                             f"the document loaded as {_short(first)}")
    if save(again) != saved:
        raise AssertionError("not idempotent: saving the reloaded value gives other bytes "
                             "than the first save")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."
