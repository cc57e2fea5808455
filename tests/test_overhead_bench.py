"""bench/overhead.py (issue 53): run at a tiny size, its JSON line has every ratio, each a
positive number, and the counts behind them are real (resumed requests were counted
across the sweep's forks). No time is asserted: the machine is shared."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATIOS = ("sweep_to_bare_ratio", "pyfakefs_to_bare_ratio", "guarded_to_bare_ratio",
          "tuned_to_bare_ratio",
          "traced_to_bare_ratio", "system_share", "floor_share")
TIERS = ("bare", "guarded", "pyfakefs", "tuned", "traced")


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def test_the_overhead_bench_prints_its_ratios_for_both_agents():
    done = subprocess.run([sys.executable, "bench/overhead.py", "--steps", "2", "--repeat",
                           "1", "--workers", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    line = json.loads(lines[-1])
    assert len(lines) == 3  # one line per agent, then the JSON line
    assert line["agent"] == "reference" and line["steps"] == 2
    assert set(line["by_agent"]) == {"reference", "jsonl_transcript"}
    for name, row in line["by_agent"].items():
        for key in RATIOS:
            assert _positive(row["ratios"][key]), (name, key, row["ratios"][key])
            assert line[key] == line["by_agent"]["reference"]["ratios"][key]
        assert row["ratios"]["system_share"] < 1 and row["ratios"]["floor_share"] < 1
        for tier in TIERS:  # each clean run served all 3 requests (2 steps, the answer)
            assert row[tier]["steps"] == 3, (name, tier)
            assert _positive(row[tier]["cpu_ms"]) and _positive(row[tier]["wall_ms"])
        sweep = row["sweep"]
        assert sweep["kill_points"] > 0 and sweep["resumed_runs"] > 0
        # counted in the forked children (workers=1) through shared memory: a plain
        # counter in the bench's process stays at 0 here (the parent resumes nothing)
        assert sweep["resumed_requests"] > 0
        assert _positive(sweep["cpu_s"]) and _positive(sweep["wall_s"])
        assert math.isclose(sweep["user_s"] + sweep["sys_s"], sweep["cpu_s"], abs_tol=0.002)
        assert re.fullmatch(r"/\S+ \(\w+\)", row["bare_dir"])  # its file system named


def test_an_unknown_agent_is_refused_in_one_line():
    done = subprocess.run([sys.executable, "bench/overhead.py", "--agents", "nosuch"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip() == ("bench/overhead.py: --agents: unknown agent 'nosuch' "
                                   "(known: reference, jsonl_transcript)")
