"""faultsim's own files: written whole or not at all, checked before work, and never over a
folder faultsim did not make (faultsim/reports/outfile.py)."""
from __future__ import annotations

import errno
import os

import pytest

from faultsim.reports import outfile
from faultsim.reports.outfile import OutputError


def _full_disk_after(monkeypatch, budget: int) -> None:
    """os.write accepts `budget` bytes in all, then fails as a full disk does."""
    real = os.write
    left = [budget]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[:left[0]]))
        left[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)


def test_a_full_disk_keeps_the_old_file_whole_and_leaves_no_temp_file(tmp_path, monkeypatch):
    report = tmp_path / "r.json"
    report.write_text('{"old": true}\n')
    _full_disk_after(monkeypatch, 10)
    with pytest.raises(OutputError) as err:
        outfile.write_atomic(report, "x" * 10_000, what="--json")
    assert report.read_text() == '{"old": true}\n'
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
    line = str(err.value)
    assert "--json" in line and str(report) in line and "No space left" in line
    assert "\n" not in line


def test_a_write_that_fits_replaces_the_file(tmp_path):
    report = tmp_path / "r.json"
    report.write_text("old")
    outfile.write_atomic(report, "new")
    assert report.read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
    assert report.stat().st_mode & 0o044  # readable by a CI service, as `open` would make it


def test_append_keeps_what_was_there_and_adds(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    outfile.append_atomic(summary, "# faultsim\n")
    assert summary.read_text() == "# earlier step\n# faultsim\n"
    _full_disk_after(monkeypatch, 3)
    with pytest.raises(OutputError):
        outfile.append_atomic(summary, "more " * 1000)
    assert summary.read_text() == "# earlier step\n# faultsim\n"


@pytest.mark.parametrize("where, says", [
    ("no/such/r.json", "does not exist"),
    (".", "is a folder"),
])
def test_check_writable_refuses_before_any_work_and_creates_nothing(tmp_path, where, says):
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(OutputError, match=says) as err:
        outfile.check_writable(tmp_path / where, "--junit")
    assert str(err.value).startswith("--junit ")
    assert sorted(os.listdir(tmp_path)) == before
    outfile.check_writable(tmp_path / "fine.xml", "--junit")  # and a good path passes
    assert sorted(os.listdir(tmp_path)) == before


def _staging(tmp_path, name="staging"):
    staging = tmp_path / name
    staging.mkdir()
    (staging / "manifest.json").write_text("{}")
    return staging


def test_replace_folder_keeps_a_folder_it_did_not_make(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("work\n")
    staging = _staging(tmp_path)
    with pytest.raises(OutputError, match="did not make"):
        outfile.replace_folder(staging, out, "manifest.json", what="--out")
    assert (out / "notes.txt").read_text() == "work\n"
    assert staging.exists()  # the caller removes its own staging folder


def test_replace_folder_replaces_its_own_or_an_empty_folder(tmp_path):
    out = tmp_path / "corpus"
    outfile.replace_folder(_staging(tmp_path), out, "manifest.json")
    (out / "blob").write_text("old")
    outfile.replace_folder(_staging(tmp_path), out, "manifest.json")  # its own: replaced
    assert sorted(os.listdir(out)) == ["manifest.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    outfile.replace_folder(_staging(tmp_path), empty, "manifest.json")
    assert sorted(os.listdir(empty)) == ["manifest.json"]
    assert sorted(os.listdir(tmp_path)) == ["corpus", "empty"]  # nothing aside left behind


def test_replace_folder_refuses_a_file(tmp_path):
    out = tmp_path / "a-file"
    out.write_text("mine")
    with pytest.raises(OutputError, match="not a folder"):
        outfile.replace_folder(_staging(tmp_path), out, "manifest.json")
    assert out.read_text() == "mine"
