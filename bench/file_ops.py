"""Benchmark: what one file operation of an agent costs, bare and under faultsim (issue 53,
item 1: where pyfakefs is the floor, by how much).

bench/overhead.py measures whole agent steps; this splits a step into the file operations
agents make, each timed alone, four ways in one interpreter:
  bare    a real directory on tmpfs (/dev/shm when it is tmpfs, else the temp folder)
  plain   inside pyfakefs as it ships (its Patcher, before faultsim installs its speed-ups)
  tuned   inside pyfakefs as faultsim sets it up, an interposer active but quiet (nothing
          traced): the floor of the in-process design
  traced  in a clean incarnation of faultsim's sandbox (`Explorer.incarnation`: every
          operation traced as a sweep traces it), killed nowhere
The operations, each on a `Path` as agents name files: `open` and read a 500-byte file;
`Path.read_bytes`; an atomic write as the reference agent makes it (temp file, write,
flush, fsync, `os.replace`, fsync of the folder: reference_agent/storage.py); a file
written whole (`Path.write_bytes`) and moved over another by `os.replace`; `os.stat`;
`Path.exists`. Prints a line per way (CPU µs per
operation, wall beside), then one JSON line: each way's figures and, per operation, its
CPU over the bare one's (`tuned_to_bare`, `traced_to_bare`, `plain_to_bare`); each way
says which module's file objects served it (`served_by`), and the traced one how many
trace events its operations made (`events`). Nothing here asserts a time: the ratios
within one run are the figures to read.

Run: python bench/file_ops.py [--repeat 2000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

from overhead import Timed, tmpfs_dir, tuned_pyfakefs  # noqa: E402  (the same tiers)

DATA = json.dumps({"steps": list(range(100))}).encode()  # about a small checkpoint's size
OPERATIONS = ("open_read", "read_bytes", "atomic_write", "replace", "stat", "exists")


def measure(base: str, repeat: int) -> dict:
    """CPU and wall µs per operation, each run `repeat` times in folder `base` (whichever
    file system `open` and `os` reach from here: the real one, or pyfakefs's)."""
    from reference_agent.storage import atomic_write_bytes

    path = Path(base) / "checkpoint.json"
    other = Path(base) / "other.json"
    path.write_bytes(DATA)

    def open_read():
        with open(path, "rb") as f:
            f.read()

    def replace():
        other.write_bytes(DATA)
        os.replace(other, path)

    runs = {"open_read": open_read, "read_bytes": path.read_bytes,
            "atomic_write": lambda: atomic_write_bytes(path, DATA), "replace": replace,
            "stat": lambda: os.stat(path), "exists": path.exists}
    with open(path, "rb") as f:  # which file system served them (the test checks it)
        out: dict = {"served_by": type(f).__module__}
    for name in OPERATIONS:
        run = runs[name]
        run()  # first-call caches
        with Timed() as t:
            for _ in range(repeat):
                run()
        out[name] = {"cpu_us": round(1e6 * (t.user + t.sys) / repeat, 2),
                     "wall_us": round(1e6 * t.wall / repeat, 2)}
    return out


def way_bare(repeat: int) -> dict:
    base, _ = tmpfs_dir()  # bench/overhead.py's bare folder
    try:
        return measure(base, repeat)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def way_plain(repeat: int) -> dict:
    from pyfakefs.fake_filesystem_unittest import Patcher

    with Patcher() as patcher:
        patcher.fs.create_dir("/file-ops-bench")
        return measure("/file-ops-bench", repeat)


def way_tuned(repeat: int) -> dict:
    with tuned_pyfakefs() as sandbox:  # bench/overhead.py's tuned tier
        return measure(sandbox, repeat)


def way_traced(repeat: int) -> dict:
    """The operations as an agent's run() in a clean traced incarnation."""
    import tomllib

    from faultsim.inprocess.sandbox import Explorer
    from faultsim.scenario import parse_scenario

    scenario = parse_scenario(tomllib.loads(SCENARIO), path="bench/file_ops.py")
    found: dict = {}

    class Agent:
        def __init__(self, env) -> None:
            self.env = env

        def run(self) -> str:
            found.update(measure(str(self.env.workdir), repeat))
            return "done"

    with Explorer(Agent, scenario, agent_name="file_ops") as ex:
        ex.reset_sandbox()
        inc = ex.incarnation(ex.new_world(), timed=False)
        if not found or inc.outcome is None:
            raise SystemExit(f"bench/file_ops.py: the traced run measured nothing: "
                             f"{inc.error or inc.outcome!r}")
    # what was traced: each write, fsync and rename an event (the test checks the count)
    found["events"] = len(inc.events)
    return found


SCENARIO = """
id = "file_ops"
task = "time the file operations"
expected_final_answer = "done"

[[turns]]
final = "done"
"""


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="bench/file_ops.py", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2000,
                        help="times each operation runs in each way (default 2000)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    # plain first: faultsim's speed-ups, once installed, stay for the process
    ways = {"bare": way_bare(args.repeat), "plain": way_plain(args.repeat),
            "tuned": way_tuned(args.repeat), "traced": way_traced(args.repeat)}
    for way, row in ways.items():
        print(f"{way:7s}" + "  ".join(f"{name} {row[name]['cpu_us']:.1f} "
                                       f"({row[name]['wall_us']:.1f})"
                                       for name in OPERATIONS) + "  [CPU µs (wall)]")
    ratios = {name: {f"{way}_to_bare": round(ways[way][name]["cpu_us"]
                                             / max(ways["bare"][name]["cpu_us"], 0.01), 2)
                     for way in ("plain", "tuned", "traced")} for name in OPERATIONS}
    result = {"repeat": args.repeat, "ways": ways, "ratios": ratios}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
