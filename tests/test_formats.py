"""Checkpoint-format regression: the stored corpora (version 1, recorded by the previous
release's writer, and version 2) resume under the current code; a release that drops the
migration fails; a corpus that was tampered with is refused, naming the file."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reference_agent
from conftest import DATA, ROOT
from faultsim import load_scenario
from faultsim.cli import main
from faultsim.errors import UsageError
from faultsim.formats import Corpus, CorpusError, check_corpus, record_corpus
from faultsim.formats.hostile import Attack, fixed_cases, large_case
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


# -- a corpus folder is replaced only if it is one; the scenario's checkpoint is the one ----
def test_recording_replaces_its_own_corpus_and_nothing_else(tmp_path):
    scenario = load_scenario(DATA / "tiny.toml")
    out = tmp_path / "corpus"
    first = record_corpus(reference_agent.make_agent, scenario, out, agent="reference_agent",
                          only=lambda p: p.index <= 3)
    again = record_corpus(reference_agent.make_agent, scenario, out, agent="reference_agent",
                          only=lambda p: p.index <= 6)  # its own corpus: replaced whole
    assert len(Corpus.open(out).entries) == len(again.entries) > len(first.entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no staging left
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="did not make"):
        record_corpus(reference_agent.make_agent, scenario, notes, agent="reference_agent")
    assert [p.name for p in notes.iterdir()] == ["notes.txt"]


@pytest.fixture
def receipts(monkeypatch):
    """The tutorial's agent, written as a team writes one: its state is `state.json`,
    declared by its scenario's `[checkpoint] files`."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "receipts"))
    import receipts_agent

    return receipts_agent, load_scenario(ROOT / "examples" / "receipts" / "scenario.toml")


def test_the_declared_checkpoint_gives_the_format_version(tmp_path, receipts):
    agent, scenario = receipts
    corpus = record_corpus(agent.make_agent, scenario, tmp_path / "c", agent="receipts_agent",
                           only=lambda p: p.index <= 12)
    assert corpus.format_versions == [1]  # state.json's "version", not checkpoint.json's


def test_hostile_files_replace_the_declared_checkpoint(receipts):
    agent, scenario = receipts
    with Attack(agent.make_agent, scenario) as attack:
        assert attack.path == "state.json"
        future = next(c for c in fixed_cases(attack.sample) if c.name == "future version")
        verdict = attack(future)
        # the guard's other side: this agent reads any size of state.json, and the very
        # large file (to be refused unread) gets through it
        large = attack(large_case(attack.sample))
    assert verdict.ok and "unknown version 999" in verdict.error
    assert not large.ok and "accepted it" in large.problems[0]


def test_formats_check_hostile_0_hands_over_the_fixed_cases(tmp_path, capsys):
    out = tmp_path / "c"
    record_corpus(reference_agent.make_agent, load_scenario(DATA / "tiny.toml"), out,
                  agent="reference_agent", only=lambda p: p.index <= 3)
    assert main(["formats", "check", str(out), "--hostile", "0"]) == 0
    said = capsys.readouterr().out
    assert f"{out}: hostile checkpoint files (17 fixed, 0 drawn) given to reference_agent: " \
        "all refused" in said, said


def test_a_checkpoint_the_hostile_cases_cannot_be_built_from_is_said():
    from faultsim.formats.hostile import NoHostileCases
    from tests.thinking_jsonl_agent import make_agent

    with pytest.raises(NoHostileCases, match=r"no checkpoint \(conversation.jsonl\) that is "
                       "one JSON object"):
        Attack(make_agent, load_scenario(DATA / "thinking_jsonl.toml")).__enter__()
