"""Retention (P12): completed runs expire after a day, failed ones after a week, for
post-mortems; a running task's checkpoint never expires by itself."""
from __future__ import annotations

import datetime as _dt
import json
import shutil
from pathlib import Path

COMPLETED_TTL = _dt.timedelta(hours=24)
FAILED_TTL = _dt.timedelta(days=7)
_TTL = {"completed": COMPLETED_TTL, "escalated": FAILED_TTL, "failed": FAILED_TTL}


def expired(status: dict, now: _dt.datetime) -> bool:
    ttl = _TTL.get(status.get("status"))  # running (or unknown): never
    if ttl is None:
        return False
    try:
        updated = _dt.datetime.fromisoformat(status["updated_at"])
    except (KeyError, TypeError, ValueError):
        return False  # cannot tell its age: keep it
    return now - updated >= ttl


def sweep(runs_dir: Path, now: _dt.datetime, *, keep: str) -> list[str]:
    """Delete expired run directories (other than `keep` and its children); return them."""
    removed = []
    if not runs_dir.is_dir():
        return removed
    for run in sorted(runs_dir.iterdir()):
        name = run.name
        if name == keep or name.startswith(keep + ":") or not run.is_dir():
            continue
        try:
            status = json.loads((run / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # no readable status: not ours to judge
        if isinstance(status, dict) and expired(status, now):
            shutil.rmtree(run)
            removed.append(name)
    return removed
