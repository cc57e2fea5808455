"""Checkpoint-format regression: the stored corpora (version 1, recorded by the previous
release's writer, and version 2) resume under the current code; a release that drops the
migration fails; a corpus that was tampered with is refused, naming the file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reference_agent
from conftest import DATA
from faultsim import load_scenario
from faultsim.cli import main
from faultsim.formats import Corpus, CorpusError, check_corpus, record_corpus
from tests.broken_agents import no_v1_migration

CORPORA = Path(__file__).parent / "corpora"


@pytest.mark.parametrize("name, version", [("v1", 1), ("v2", 2)])
def test_the_stored_corpora_resume_under_the_current_code(name, version):
    corpus = Corpus.open(CORPORA / name)
    assert corpus.format_versions == [version]
    assert {e.format_version for e in corpus.entries} == {version, None} or \
        {e.format_version for e in corpus.entries} == {version}
    verdicts = check_corpus(reference_agent.make_agent, corpus)
    assert len(verdicts) == len(corpus.entries) > 100
    assert all(v.ok for v in verdicts), "\n\n".join(v.describe() for v in verdicts
                                                    if not v.ok)


def test_a_release_that_drops_the_v1_migration_fails_the_v1_corpus():
    corpus = Corpus.open(CORPORA / "v1")
    verdicts = check_corpus(no_v1_migration, corpus)
    failed = [v for v in verdicts if not v.ok]
    # every state with a v1 checkpoint fails, but those of a run already recorded complete
    # (the agent reports the result without loading the checkpoint)
    def complete(entry) -> bool:
        digest = entry.files.get("runs/pair/run.json")
        return bool(digest) and json.loads(corpus.blob(digest)).get("status") == "completed"

    with_checkpoint = [e for e in corpus.entries if e.format_version == 1 and not complete(e)]
    assert {v.entry.id for v in failed} == {e.id for e in with_checkpoint}
    assert len(failed) > 50
    assert "unknown checkpoint version 1" in failed[0].describe()
    v2 = check_corpus(no_v1_migration, Corpus.open(CORPORA / "v2"))
    assert all(v.ok for v in v2)  # the same release still reads its own format


def test_recording_is_deterministic(tmp_path):
    scenario = load_scenario(DATA / "pair.toml")
    for out in ("a", "b"):
        record_corpus(reference_agent.make_agent, scenario, tmp_path / out,
                      agent="reference_agent")
    a, b = (json.loads((tmp_path / x / "manifest.json").read_text()) for x in "ab")
    assert a == b and len(a["entries"]) > 100
    assert sorted(p.name for p in (tmp_path / "a/blobs").iterdir()) == \
        sorted(p.name for p in (tmp_path / "b/blobs").iterdir())


def test_each_kill_point_is_in_exactly_one_entry(tmp_path):
    corpus = Corpus.open(CORPORA / "v2")
    ids = [k for e in corpus.entries for k in e.kill_points]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("damage, field", [
    (lambda c: (c / "scenario.toml").write_text("task = 'changed'\n"), "(file)"),
    (lambda c: (c / "manifest.json").write_text('{"faultsim_corpus": 9}'), "faultsim_corpus"),
    (lambda c: (c / "manifest.json").unlink(), "(file)"),
])
def test_a_damaged_corpus_is_refused_naming_the_file(tmp_path, damage, field):
    copy = tmp_path / "c"
    shutil.copytree(CORPORA / "v1", copy)
    damage(copy)
    with pytest.raises(CorpusError) as info:
        check_corpus(reference_agent.make_agent, copy)
    assert info.value.field == field and str(copy) in str(info.value)


def test_a_blob_that_changed_is_refused(tmp_path):
    copy = tmp_path / "c"
    shutil.copytree(CORPORA / "v1", copy)
    entry = Corpus.open(copy).entries[-1]
    blob = next(d for d in entry.files.values() if d)
    (copy / "blobs" / blob).write_bytes(b"{}")
    with pytest.raises(CorpusError, match="does not match its sha256"):
        check_corpus(reference_agent.make_agent, copy)


def test_the_command_line(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert main(["formats", "record", str(DATA / "pair.toml"), "--agent",
                 "reference_agent.v1", "--check-agent", "reference_agent", "--out",
                 str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("recorded ") and "format version 1) of pair by reference_agent.v1" \
        in said
    assert main(["formats", "check", str(out)]) == 0
    assert ": ok" in capsys.readouterr().out
    assert main(["formats", "check", str(out), "--agent", "tests.broken_agents:no_v1_migration"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main(["formats", "check", str(tmp_path / "nothing")]) == 2
    assert "no manifest: not a faultsim corpus" in capsys.readouterr().err


def test_the_fixture_checks_and_records(pytester):
    import shutil as sh

    pytester.makeini("[pytest]\n")
    sh.copy(DATA / "pair.toml", pytester.path / "pair.toml")
    pytester.makepyfile(test_corpus="""
        import pytest
        from reference_agent import make_agent

        @pytest.mark.faultsim("pair.toml", agent=make_agent)
        def test_format(crash_safety):
            verdicts = crash_safety.corpus("corpora/pair")
            print("CHECKED", len(verdicts))
        """)
    missing = pytester.runpytest_subprocess("-p", "no:randomly")
    missing.assert_outcomes(failed=1)
    assert "no corpus at" in missing.stdout.str() and "--faultsim-record" in missing.stdout.str()
    recorded = pytester.runpytest_subprocess("-s", "--faultsim-record")
    recorded.assert_outcomes(passed=1)
    assert (pytester.path / "corpora/pair/manifest.json").exists()
    checked = pytester.runpytest_subprocess("-s")
    checked.assert_outcomes(passed=1)
    assert "CHECKED 1" in checked.stdout.str()  # a count: 1xx states


# -- the round-trip property, on the reference agent's own format ----------------------------
from hypothesis import given, settings  # noqa: E402

from faultsim.formats.roundtrip import (assert_round_trip, corpus_documents,  # noqa: E402
                                        documents)
from reference_agent.checkpoint import Checkpoint, dumps, loads  # noqa: E402

SAMPLES = corpus_documents(CORPORA / "v1", CORPORA / "v2")


def test_the_samples_hold_both_versions():
    assert {json.loads(s)["version"] for s in SAMPLES} == {1, 2}


@settings(max_examples=200, deadline=None)
@given(documents(SAMPLES))
def test_load_migrate_save_is_lossless_and_idempotent(document):
    assert_round_trip(loads, dumps, document)


def test_a_lossy_save_is_caught():
    def lossy(checkpoint: Checkpoint) -> bytes:  # forgets the token count
        return dumps(Checkpoint(checkpoint.task, checkpoint.turns, 0, checkpoint.messages,
                                checkpoint.pendingToolUse))

    doc = next(s for s in SAMPLES if json.loads(s)["tokensUsed"] > 0)
    with pytest.raises(AssertionError, match="not lossless"):
        assert_round_trip(loads, lossy, doc)
