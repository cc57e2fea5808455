"""Checkpoint-format regression checks: record an agent's durable state at each kill point
of a scenario into a corpus, and check later releases against it (faultsim's third use).

May import: `faultsim.backends` and everything below it; never a backend, never the
front ends (cli, plugin). Its runs are the in-process backend's `formats` job
(`backends.formats`, `faultsim.inprocess.formats_job`): the corpus, its manifest and the
hostile cases are this package's, the sandbox they run in is the backend's."""
from .corpus import Corpus, CorpusEntry, CorpusError
from .record import record_corpus
from .check import EntryVerdict, check_corpus

__all__ = ["Corpus", "CorpusEntry", "CorpusError", "EntryVerdict", "check_corpus",
           "record_corpus"]
