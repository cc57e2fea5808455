"""The class of issue 51's bad inputs, kept: each one, given to the real `faultsim` command
line (in-process `faultsim.cli.main`), is refused in exactly one line on stderr that names
the file and the field or option at fault, with the usage exit code (2), and leaves the
folder it was run in exactly as it was (no report, corpus, staging folder or temp file
behind, and nothing someone else put there removed or changed).

Scenario files (syntax with its line, types, unknown keys, missing files), agent specs,
flag values, output paths that cannot be written, hostile corpora (blob names that are not
digests, `..` and absolute paths, links out of the corpus, a FIFO, an oversized blob,
damaged manifests) and forged, damaged, tampered or other-release replay tokens. Each
case is cheap: every refusal comes before any crash run (most before any agent import).
tests/test_validate.py has the scenario format's rules one by one, tests/test_formats.py
the corpus's own damage, tests/test_errors.py the exit code of each error kind; this file
keeps the promise across them, through the command line."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import DATA
from faultsim import __version__
from faultsim.cli import main
from faultsim.token import ReplayToken, Step, scenario_fingerprint

TINY = DATA / "tiny.toml"


# -- the promise ---------------------------------------------------------------------------
def listing(folder: Path) -> dict[str, tuple]:
    """Every path under `folder` with what says it changed (links and FIFOs not followed),
    but Python's byte-code cache: importing the user's agent writes it, as any import does."""
    out = {}
    for path in folder.rglob("*"):
        if "__pycache__" in path.relative_to(folder).parts:
            continue
        info = path.lstat()
        out[str(path.relative_to(folder))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return out


def refused(argv: list[str], folder: Path, capsys, argparse: bool = False
            ) -> tuple[int, list[str], dict, dict]:
    """Run `faultsim ARGV` in `folder`: its exit code, its error lines, and the folder's
    listing before and after."""
    before = listing(folder)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from parse_args
        code = exc.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    if argparse:  # argparse prints its usage first; the error is its last line
        lines = [line for line in lines if "error:" in line]
    return code, lines, before, listing(folder)


# -- inputs ----------------------------------------------------------------------------------
@dataclass
class Case:
    id: str
    make: Callable[[Path], tuple[list[str], tuple[str, ...]]]  # folder -> (argv, names)
    argparse: bool = False


def scenario(text: str, *, name: str = "s.toml", command: str = "run"):
    """A scenario file holding `text` (str or bytes), given to `command`."""
    def make(tmp: Path):
        path = tmp / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        argv = {"run": ["run", str(path), "--agent", "reference_agent"],
                "list": ["list", str(path), "--agent", "reference_agent"],
                "record": ["formats", "record", str(path), "--out", str(tmp / "c")]}[command]
        return argv, (str(path),)
    return make


VALID = TINY.read_text()


def with_names(make, *names):
    def made(tmp: Path):
        argv, found = make(tmp)
        return argv, found + names
    return made


def run_flags(*flags: str, names: tuple[str, ...] = ()):
    def make(tmp: Path):
        return ["run", str(TINY), "--agent", "reference_agent", *flags], names
    return make


def run_output(flag: str):
    """`run --FLAG missing/report`: refused before the clean runs start."""
    def make(tmp: Path):
        where = tmp / "missing" / "report"
        return ["run", str(TINY), "--agent", "reference_agent", flag, str(where)], \
            (flag, str(where))
    return make


def agent_spec(spec: Callable[[Path], str], *names: str):
    def make(tmp: Path):
        return ["run", str(TINY), "--agent", spec(tmp)], names
    return make


def broken_agent(tmp: Path) -> str:
    (tmp / "broken_agent.py").write_text("def make_agent(env:\n")
    return str(tmp / "broken_agent.py")


def attrless_agent(tmp: Path) -> str:
    (tmp / "attrless_agent.py").write_text("x = 1\n")
    return str(tmp / "attrless_agent.py") + ":make_it"


# corpora ----------------------------------------------------------------------------------
def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def corpus(tmp: Path, agent: str = "reference_agent") -> Path:
    """A small, valid corpus of tiny.toml (one entry), written by hand."""
    folder = tmp / "corpus"
    (folder / "blobs").mkdir(parents=True)
    source = TINY.read_bytes()
    (folder / "scenario.toml").write_bytes(source)

    def put(data: bytes) -> str:
        (folder / "blobs" / sha(data)).write_bytes(data)
        return sha(data)

    manifest = {"faultsim_corpus": 1, "scenario": {"id": "tiny", "sha256": sha(source)},
                "agent": agent, "recorded_by": agent, "agent_version": "1.0",
                "format_versions": [], "faultsim_version": __version__,
                "entries": [{"id": "k1-start", "kill_points": ["k1-start"],
                             "category": "start", "format_version": None,
                             "files": {"state/checkpoint.json": put(b"{}")},
                             "world": put(b"{}")}]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def manifest_edit(edit: Callable[[dict, Path], None], *names: str):
    """A corpus whose manifest `edit` changed; `formats check` refuses it, naming the
    manifest file and `names` (its field)."""
    def make(tmp: Path):
        folder = corpus(tmp)
        doc = json.loads((folder / "manifest.json").read_text())
        edit(doc, tmp)
        (folder / "manifest.json").write_text(json.dumps(doc))
        return ["formats", "check", str(folder)], (str(folder / "manifest.json"),) + names
    return make


def set_file(path: str, digest: str):
    def edit(doc: dict, tmp: Path) -> None:
        doc["entries"][0]["files"] = {path: digest}
    return edit


def outside_blob(doc: dict, tmp: Path) -> None:
    """A blob name that climbs out of blobs/ to a file outside the corpus."""
    (tmp / "secret.txt").write_text("not the corpus's")
    doc["entries"][0]["files"]["state/checkpoint.json"] = "../../secret.txt"


def corpus_file(change: Callable[[Path], Path], *names: str):
    """A corpus one of whose files `change` replaced (it returns the file named)."""
    def make(tmp: Path):
        folder = corpus(tmp)
        named = change(folder)
        return ["formats", "check", str(folder), "--hostile", "0"], (str(named),) + names
    return make


def first_blob(folder: Path) -> Path:
    doc = json.loads((folder / "manifest.json").read_text())
    return folder / "blobs" / doc["entries"][0]["files"]["state/checkpoint.json"]


def blob_linked_to_dev_zero(folder: Path) -> Path:
    blob = first_blob(folder)
    blob.unlink()
    blob.symlink_to("/dev/zero")  # a digest's name, read without end before
    return blob


def blob_as_fifo(folder: Path) -> Path:
    blob = first_blob(folder)
    blob.unlink()
    os.mkfifo(blob)  # opening it for reading would wait for a writer for ever
    return blob


def blob_oversized(folder: Path) -> Path:
    blob = first_blob(folder)
    with open(blob, "r+b") as f:
        f.truncate(257 * 1024 * 1024)  # sparse: costs no disk
    return blob


def manifest_linked_out(folder: Path) -> Path:
    outside = folder.parent / "elsewhere.json"
    (folder / "manifest.json").rename(outside)
    (folder / "manifest.json").symlink_to(outside)
    return folder / "manifest.json"


def manifest_text(text: str):
    def change(folder: Path) -> Path:
        (folder / "manifest.json").write_text(text)
        return folder / "manifest.json"
    return change


# record --out ------------------------------------------------------------------------------
def record_into(prepare: Callable[[Path], Path], *names: str):
    """`formats record tiny.toml --out OUT`, OUT made by `prepare`: refused before the
    agent runs, OUT kept as it is."""
    def make(tmp: Path):
        out = prepare(tmp)
        return ["formats", "record", str(TINY), "--out", str(out)], \
            ("--out", str(out)) + names
    return make


def someones_folder(tmp: Path) -> Path:
    (tmp / "notes").mkdir()
    (tmp / "notes" / "notes.txt").write_text("someone's notes\n")  # issue 51: rmtree'd
    return tmp / "notes"


def foreign_manifest(tmp: Path) -> Path:
    (tmp / "ext").mkdir()
    (tmp / "ext" / "manifest.json").write_text('{"manifest_version": 3}')  # not a corpus
    return tmp / "ext"


def a_file(tmp: Path) -> Path:
    (tmp / "corpus.txt").write_text("a file\n")
    return tmp / "corpus.txt"


# tokens ------------------------------------------------------------------------------------
def token(tmp: Path, *, version: str = __version__, fingerprint: bool = True,
          scenario_name: str = "tiny.toml") -> str:
    path = tmp / scenario_name
    path.write_bytes(TINY.read_bytes())
    return ReplayToken(str(path), "reference_agent", "process", "0", (Step(5, None, 0),),
                       "in-process", version,
                       scenario_fingerprint(str(path)) if fingerprint else "").encode()


def replay(make_token: Callable[[Path], str], *names: str, extra: tuple[str, ...] = ()):
    def make(tmp: Path):
        return ["replay", make_token(tmp), *extra], names
    return make


def forged(doc: list) -> Callable[[Path], str]:
    import base64
    import zlib

    def make(tmp: Path) -> str:
        raw = zlib.compress(json.dumps(doc).encode())
        return "fs1_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return make


def tampered(version: str) -> Callable[[Path], str]:
    """A token whose scenario file was edited after it was made."""
    def make(tmp: Path) -> str:
        text = token(tmp, version=version)
        (tmp / "tiny.toml").write_text(VALID.replace("Refunded", "Reimbursed"))
        return text
    return make


def replay_json_into_missing(tmp: Path):
    where = tmp / "missing" / "v.json"
    return ["replay", token(tmp), "--json", str(where)], ("--json", str(where))


def from_messages_into_missing(tmp: Path):
    (tmp / "m.json").write_text(json.dumps([{"role": "user", "content": "hi"},
                                            {"role": "assistant", "content": "done"}]))
    where = tmp / "missing" / "s.toml"
    return ["scenario", "from-messages", str(tmp / "m.json"), "--out", str(where)], \
        ("--out", str(where))


CASES = [
    # scenario files, through run, list and formats record
    Case("toml-syntax-keeps-its-line", with_names(scenario('id = "x"\ntask = \n'),
                                                  ":2: (syntax)")),
    Case("toml-syntax-in-list", with_names(scenario('[[turns]\n', command="list"),
                                           ":1: (syntax)")),
    Case("toml-syntax-in-record", with_names(scenario('id = "x"\n\ntask = = 1\n', command="record"),
                                             ":3: (syntax)")),
    Case("not-utf8", with_names(scenario(b'task = "\xff\xfe"\n'), "(syntax)", "UTF-8")),
    Case("unknown-key", with_names(scenario(VALID + 'colour = "red"\n'), "colour")),
    Case("turns-wrong-type", with_names(scenario(
        'task = "t"\nexpected_final_answer = "x"\nturns = "many"\n'), "turns")),
    Case("service-kind-wrong-type", with_names(
        scenario(VALID.replace('kind = "blind"', "kind = 3")), "services.email.kind")),
    Case("crashes-zero", with_names(
        scenario(VALID + "[fault_profile]\ncrashes = 0\n"), "fault_profile.crashes")),
    Case("missing-scenario", lambda tmp: (["run", str(tmp / "none.toml"), "--agent",
                                           "reference_agent"], (str(tmp / "none.toml"),))),
    Case("folder-without-scenarios", lambda tmp: (
        (tmp / "empty").mkdir() or ["run", str(tmp / "empty"), "--agent", "reference_agent"],
        ("empty", "no *.toml"))),
    # agent specs
    Case("agent-module-missing", agent_spec(lambda tmp: "no_such_agent_module_51",
                                            "no_such_agent_module_51")),
    Case("agent-file-missing", agent_spec(lambda tmp: str(tmp / "gone.py"), "gone.py")),
    Case("agent-file-syntax", agent_spec(broken_agent, "broken_agent.py", "line 1")),
    Case("agent-attribute-missing", agent_spec(attrless_agent, "attrless_agent.py",
                                               "make_it")),
    # flag values
    Case("workers-negative", run_flags("--workers", "-1", names=("--workers",))),
    Case("crashes-zero-flag", run_flags("--crashes", "0", names=("--crashes",))),
    Case("shard-out-of-range", run_flags("--shard", "3/2", names=("--shard",))),
    Case("timeout-negative", run_flags("--timeout", "-1", names=("--timeout",))),
    Case("search-negative", run_flags("--search", "-3", names=("--search",))),
    Case("crash-model-unknown", run_flags("--crash-model", "meteor",
                                          names=("--crash-model",)), argparse=True),
    Case("workers-not-a-number", run_flags("--workers", "many", names=("--workers",)),
         argparse=True),
    Case("hostile-negative", lambda tmp: (["formats", "check", str(corpus(tmp)),
                                           "--hostile", "-1"], ("--hostile",))),
    # output paths that cannot be written: refused before any run
    Case("json-into-missing-folder", run_output("--json")),
    Case("junit-into-missing-folder", run_output("--junit")),
    Case("html-into-missing-folder", run_output("--html")),
    Case("summary-md-into-missing-folder", run_output("--summary-md")),
    Case("baseline-missing", run_output("--baseline")),
    Case("replay-json-into-missing-folder", replay_json_into_missing),
    Case("from-messages-out-into-missing-folder", from_messages_into_missing),
    Case("record-over-someones-folder", record_into(someones_folder, "notes")),
    Case("record-over-a-foreign-manifest", record_into(foreign_manifest, "not a faultsim")),
    Case("record-over-a-file", record_into(a_file, "not a folder")),
    Case("record-into-missing-folder", record_into(lambda tmp: tmp / "no" / "corpus",
                                                   "does not exist")),
    # hostile corpora
    Case("blob-name-climbs-out", manifest_edit(outside_blob,
                                               'entries[0].files["state/checkpoint.json"]',
                                               "sha256")),
    Case("blob-name-dev-zero", manifest_edit(
        set_file("state/checkpoint.json", "../../../../../../../dev/zero"),
        'entries[0].files["state/checkpoint.json"]', "sha256")),
    Case("blob-name-not-a-digest", manifest_edit(
        set_file("state/checkpoint.json", "ABC"), "entries[0].files", "sha256")),
    Case("world-not-a-digest", manifest_edit(
        lambda doc, tmp: doc["entries"][0].update(world="../manifest.json"),
        "entries[0].world", "sha256")),
    Case("entry-path-absolute", manifest_edit(
        set_file("/etc/cron.d/x", sha(b"{}")), 'entries[0].files["/etc/cron.d/x"]',
        "absolute")),
    Case("entry-path-climbs-out", manifest_edit(
        set_file("state/../../x.json", sha(b"{}")), 'entries[0].files["state/../../x.json"]',
        "..")),
    Case("kill-points-not-strings", manifest_edit(
        lambda doc, tmp: doc["entries"][0].update(kill_points=[1]),
        "entries[0].kill_points")),
    Case("manifest-truncated", corpus_file(manifest_text('{"faultsim_corpus": 1, "ent'),
                                           "(file)", "not valid JSON")),
    Case("manifest-not-an-object", corpus_file(manifest_text("[1, 2]"), "(top level)")),
    Case("manifest-missing", corpus_file(
        lambda folder: (folder / "manifest.json").unlink() or folder / "manifest.json",
        "(file)")),
    Case("manifest-links-out", corpus_file(manifest_linked_out, "(file)", "outside")),
    Case("blob-links-to-dev-zero", corpus_file(blob_linked_to_dev_zero, "(blob)",
                                               "outside")),
    Case("blob-is-a-fifo", corpus_file(blob_as_fifo, "(blob)", "not a regular file")),
    Case("blob-oversized", corpus_file(blob_oversized, "(blob)", "MiB")),
    # replay tokens
    Case("token-truncated", replay(lambda tmp: token(tmp)[:-8], "token", "damaged")),
    Case("token-not-a-token", replay(lambda tmp: "k12-after-effect", "k12-after-effect")),
    Case("token-forged-no-crash", replay(forged(["s.toml", "a", "process", "0", []]),
                                         "token", "no crash")),
    Case("token-forged-mode", replay(forged(["s.toml", "a", "process", "0", [[1, -1, 0]],
                                             "on-the-moon"]), "token", "on-the-moon")),
    Case("token-other-format", replay(lambda tmp: "fs2_" + token(tmp)[4:], "fs2", "fs1")),
    Case("token-scenario-gone", replay(
        lambda tmp: ReplayToken(str(tmp / "gone.toml"), "reference_agent", "process", "0",
                                (Step(5, None, 0),)).encode(), "gone.toml")),
    Case("token-scenario-tampered", replay(tampered(__version__), "tiny.toml", "changed")),
    Case("token-other-release-tampered", replay(tampered("0.0.1"), "tiny.toml", "0.0.1",
                                                __version__)),
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The run's folder: the temp dir, as current directory, with no project settings."""
    for key in [k for k in os.environ if k.startswith("FAULTSIM_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_is_one_line_naming_it_exit_2_and_nothing_left(case, folder, capsys):
    argv, names = case.make(folder)
    code, lines, before, after = refused(argv, folder, capsys, argparse=case.argparse)
    assert len(lines) == 1, lines
    assert code == 2, (code, lines[0])
    for name in names:
        assert name in lines[0], (name, lines[0])
    assert after == before, "a file was left behind, changed or removed"


def test_the_class_is_wide():
    assert len(CASES) >= 30


# -- the corpus and token fixtures are good: each refusal above is its input's -------------
def test_the_hand_made_corpus_and_token_are_accepted(folder, capsys):
    assert main(["formats", "check", "--show", str(corpus(folder))]) == 0
    assert "reference_agent" in capsys.readouterr().out
    assert main(["replay", "--show", token(folder)]) == 0
    assert "unchanged since the token was made" in capsys.readouterr().out


# -- showing what a token or a corpus would run, running nothing -----------------------------
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('imported')\n" \
       "def make_agent(env):\n    raise RuntimeError('ran')\n"


def evil_agent(folder: Path) -> tuple[Path, Path]:
    marker = folder / "imported.txt"
    (folder / "evil_agent.py").write_text(EVIL.format(marker=str(marker)))
    return folder / "evil_agent.py", marker


def test_replay_show_names_the_agent_and_imports_nothing(folder, capsys):
    agent, marker = evil_agent(folder)
    scenario_file = folder / "tiny.toml"
    scenario_file.write_bytes(TINY.read_bytes())
    text = ReplayToken(str(scenario_file), str(agent), "power", "7",
                       (Step(5, None, 0), Step(9, 128, 1)), "in-process", "0.0.1",
                       scenario_fingerprint(str(scenario_file))).encode()
    assert main(["replay", "--show", text]) == 0
    shown = capsys.readouterr().out
    assert not marker.exists() and "evil_agent" not in sys.modules
    for fact in (str(agent), str(scenario_file), "unchanged", "power", "seed:         7",
                 "faultsim 0.0.1", f"this is faultsim {__version__}", "after event #5",
                 "inside the write of event #9, after 128 bytes"):
        assert fact in shown, (fact, shown)
    # the guard's other side: without --show the same token imports the agent
    main(["replay", text])
    capsys.readouterr()
    assert marker.exists()
    sys.modules.pop("evil_agent", None)


def test_formats_check_show_names_the_agent_and_imports_nothing(folder, capsys):
    agent, marker = evil_agent(folder)
    made = corpus(folder, agent=str(agent))
    assert main(["formats", "check", "--show", str(made)]) == 0
    shown = capsys.readouterr().out
    assert not marker.exists() and "evil_agent" not in sys.modules
    assert f"agent it runs:   {agent}" in shown and "states:          1 (1 kill points)" in shown
    main(["formats", "check", str(made), "--hostile", "0"])  # without --show: imported
    capsys.readouterr()
    assert marker.exists()
    sys.modules.pop("evil_agent", None)


def test_a_token_of_another_release_replays_after_one_warning(folder, capsys):
    made = token(folder, version="0.0.1")
    code = main(["replay", made])
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (0, 1)  # it replays: the verdict is the replay's own
    assert len(err) == 1 and err[0].startswith("faultsim: warning: ") and \
        "faultsim 0.0.1" in err[0] and f"faultsim {__version__}" in err[0], err
    assert main(["replay", token(folder)]) == code  # the same release: no word
    assert capsys.readouterr().err == ""
