"""Checkpoint-format regression checks: record an agent's durable state at each kill point
of a scenario into a corpus, and check later releases against it (faultsim's third use).

May import: the in-process backend (`inprocess/`) and everything below it; never the
orchestrator (`engine`) or the front ends (cli, plugin)."""
from .corpus import Corpus, CorpusEntry, CorpusError
from .record import record_corpus
from .check import EntryVerdict, check_corpus

__all__ = ["Corpus", "CorpusEntry", "CorpusError", "EntryVerdict", "check_corpus",
           "record_corpus"]
