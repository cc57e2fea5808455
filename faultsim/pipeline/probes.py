"""The version probe's tampering, shared by both modes (P4): every checkpoint in a crash
state rewritten with a version no release of the agent can know.

Where a checkpoint can live: a `checkpoint.json` file, a Redis string value under a key
ending in `/checkpoint` (`@redis/...` entries of a subprocess crash state), and a row of an
SQLite database file (subprocess mode), in any table and column, whose text is a JSON
object with a `version` field."""
from __future__ import annotations

import json
import os
import tempfile

from ..core.checkpoints import DEFAULT, CheckpointSpec

PROBE_VERSION = 999
SQLITE_HEADER = b"SQLite format 3\x00"


def _retagged(data: bytes | str) -> bytes | None:
    """The JSON object `data` with its version replaced, or None when it is not one."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, TypeError):
        return None
    if not isinstance(doc, dict) or "version" not in doc:
        return None
    doc["version"] = PROBE_VERSION
    return json.dumps(doc).encode()


def tamper_versions(files: dict, spec: CheckpointSpec = DEFAULT) -> dict[str, bytes]:
    """The entries of `files` that hold a versioned checkpoint, rewritten (path -> bytes);
    empty when the state keeps none the probe can find. Checkpoints are the scenario's
    declared ones (`spec`), else checkpoint.json files and Redis keys ending /checkpoint."""
    changed = {}
    for path, data in files.items():
        if not isinstance(data, bytes) or not data:
            continue
        if spec.matches(path) and spec.format_of(path) == "json":
            new = _retagged(data)
            if new is not None:
                changed[path] = new
        elif data.startswith(SQLITE_HEADER) and not path.startswith("@"):
            new = _tamper_sqlite(data)
            if new is not None:
                changed[path] = new
    return changed


def _tamper_sqlite(data: bytes) -> bytes | None:
    """The database file with every JSON object that has a `version` (in any text or blob
    cell) retagged; None when it has none. Done on a private copy in a temporary folder."""
    import sqlite3

    with tempfile.TemporaryDirectory(prefix="faultsim-probe-") as tmp:
        path = os.path.join(tmp, "probe.db")
        with open(path, "wb") as f:
            f.write(data)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            count = 0
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%'")]
            for table in tables:
                quoted = '"' + table.replace('"', '""') + '"'
                columns = [r[1] for r in conn.execute(f"PRAGMA table_info({quoted})")]
                for rowid, *cells in conn.execute(
                        f"SELECT rowid, {', '.join(chr(34) + c + chr(34) for c in columns)} "
                        f"FROM {quoted}").fetchall():
                    for column, cell in zip(columns, cells):
                        if not isinstance(cell, (str, bytes)):
                            continue
                        new = _retagged(cell)
                        if new is None:
                            continue
                        value = new.decode() if isinstance(cell, str) else new
                        conn.execute(f'UPDATE {quoted} SET "{column}" = ? WHERE rowid = ?',
                                     (value, rowid))
                        count += 1
        finally:
            conn.close()
        if not count:
            return None
        with open(path, "rb") as f:
            return f.read()
