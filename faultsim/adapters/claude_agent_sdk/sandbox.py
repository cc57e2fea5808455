"""The sandbox one incarnation runs in: `work/` (the agent's cwd), `claude/` (the CLI's
config dir, with the transcripts), `home/`, `tmp/`; read whole at a kill, restored whole
before a resume, at the same absolute path (the CLI names a project by its cwd)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

DIRS = ("work", "claude", "home", "tmp")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under the sandbox, by path relative to it."""
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def restore(root: Path, files: dict[str, bytes | None]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for d in DIRS:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        if data is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)



def work_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """The agent's working directory's files, as the oracle reads a workdir."""
    return {p[len("work/"):]: d for p, d in files.items() if p.startswith("work/")}


@contextlib.contextmanager
def sandbox_root(name: str, root: Path | None = None) -> Iterator[Path]:
    """`root`, or a fresh sandbox path in a temporary folder removed afterwards."""
    if root is not None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix=f"faultsim-{name}-") as tmp:
        yield Path(tmp) / "sandbox"
