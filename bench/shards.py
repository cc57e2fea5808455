"""Resumed runs per shard: the reference agent on bench/scaling.py's N-step task (N=25:
1,788 kill points), whole and in 4 shards (`--shard I/4`), one worker. Prints one JSON line:
per run its kill points, explored kill points, crash states judged and resumed runs; then
the shards' sum and max of resumed runs (the sum is the whole run's: shards keep the
equal-state memo). Counts, not times: noise does not move them.

Run from the project root: python bench/shards.py [N] [SHARDS]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.getcwd())


def main(argv=None) -> None:
    import faultsim
    import reference_agent
    from scaling import scenario_text

    args = list(argv if argv is not None else sys.argv[1:])
    steps, n = (int(args[0]) if args else 25), (int(args[1]) if len(args) > 1 else 4)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scenario.toml")
        with open(path, "w") as f:
            f.write(scenario_text(steps))
        scenario = faultsim.load_scenario(path)
        out: dict = {"steps": steps}
        for shard in [None] + [(i, n) for i in range(1, n + 1)]:
            run = faultsim.explore(reference_agent.make_agent, scenario, crash_model="process",
                                   crashes=1, workers=1, shard=shard).runs[0]
            out["whole" if shard is None else "%d/%d" % shard] = {
                "kill_points": len(run.kill_points), "explored": len(run.explored),
                "states": len(run.verdicts), "resumed": run.judged}
    parts = [out["%d/%d" % (i, n)]["resumed"] for i in range(1, n + 1)]
    out["sum"], out["max"] = sum(parts), max(parts)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
