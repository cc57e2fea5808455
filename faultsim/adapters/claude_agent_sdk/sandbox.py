"""The sandbox one incarnation runs in: `work/` (the agent's cwd), `claude/` (the CLI's
config dir, with the transcripts), `home/`, `tmp/`; read whole at a kill, restored whole
before a resume, at the same absolute path (the CLI names a project by its cwd)."""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Iterator

from ...core.crashmodel import DIR
from ...core.tree import read_tree, under, write_tree

DIRS = ("work", "claude", "home", "tmp")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under the sandbox, by path relative to it (`faultsim.core.tree`'s
    read, the command backend's: no directories, no links)."""
    return read_tree(root, dirs=False, links=False)  # type: ignore[return-value]


def restore(root: Path, files: dict[str, bytes | None]) -> None:
    """The sandbox holding exactly `files` (None: no such file) and its four folders."""
    write_tree(root, {**dict.fromkeys(DIRS, DIR),
                      **{p: d for p, d in files.items() if d is not None}})


def work_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """The agent's working directory's files, as the oracle reads a workdir."""
    return under(files, "work")  # type: ignore[return-value]


@contextlib.contextmanager
def sandbox_root(name: str, root: Path | None = None) -> Iterator[Path]:
    """`root`, or a fresh sandbox path in a temporary folder removed afterwards."""
    if root is not None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix=f"faultsim-{name}-") as tmp:
        yield Path(tmp) / "sandbox"
