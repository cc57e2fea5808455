"""A sandbox on the real disk as files: {relative path: bytes, or `crashmodel.DIR` for a
directory}. Read whole after a kill (what survived the SIGKILL, the page cache included:
the process model's crash state) and written whole before a resume. One copy, shared by
both backends whose agent runs as real processes on a real sandbox: the command backend
(`faultsim.command.incarnation`) and the Claude Agent SDK adapter (its `sandbox.py`).

Standard library (and `crashmodel`'s DIR) only."""
from __future__ import annotations

import shutil
from pathlib import Path

from .crashmodel import DIR

Files = dict[str, "bytes | None"]


def read_tree(root: Path, *, dirs: bool = True, links: bool = True) -> Files:
    """Every file under `root` by its path relative to it, in path order; directories as
    DIR when `dirs`; a symbolic link read through when `links`, else left out (the
    Claude adapter's sandbox holds only what its processes wrote as regular files). A
    file that vanishes while read is left out."""
    out: Files = {}
    if not root.is_dir():
        return out
    for path in sorted(root.rglob("*")):  # never descends a linked directory
        if not links and path.is_symlink():
            continue
        rel = path.relative_to(root).as_posix()
        if path.is_dir() and not path.is_symlink():
            if dirs:
                out[rel] = DIR
        elif path.is_file():
            try:
                out[rel] = path.read_bytes()
            except OSError:
                pass
    return out


def write_tree(root: Path, files: Files) -> None:
    """Make `root` hold exactly `files` (DIR: an empty directory; parents as needed)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for rel in sorted(files):
        if files[rel] is DIR:
            (root / rel).mkdir(parents=True, exist_ok=True)
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(files[rel] or b"")


def under(files: Files, top: str) -> Files:
    """The files below the sandbox's folder `top` ("work", "home"), relative to it."""
    cut = len(top) + 1
    return {p[cut:]: d for p, d in files.items() if p.startswith(top + "/")}


def regular(files: Files) -> Files:
    """The files without the directories (what the oracle reads as a workdir)."""
    return {p: d for p, d in files.items() if d is not DIR}
