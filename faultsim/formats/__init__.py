"""Checkpoint-format regression checks: record an agent's durable state at each kill point
of a scenario into a corpus, and check later releases against it (faultsim's third use).

May import: the in-process sandbox (`inprocess/`) and everything below it; never the
front ends (cli, plugin). It drives the sandbox itself: the one route from a front end to
a backend around `faultsim.backends` (ARCHITECTURE.md)."""
from .corpus import Corpus, CorpusEntry, CorpusError
from .record import record_corpus
from .check import EntryVerdict, check_corpus

__all__ = ["Corpus", "CorpusEntry", "CorpusError", "EntryVerdict", "check_corpus",
           "record_corpus"]
