"""Diagnostic: how many resumed runs could be cut short by convergence onto the clean run.

Sweeps the reference agent (single crash, process model, one worker) on the N-step
scenario of bench/scaling.py, and at every model request of every resumed run compares
its state with the clean run's at the request with as many model answers in it, under
three equivalences, each looser than the one before:
  a  the sandbox's files, the request's body and the whole world (clock, services, the
     fake's per-turn answer and fault counts, ledger length, request count, incarnation)
  b  a without the three counts that only number things (ledger length, request count,
     incarnation): a cut would also have to show the agent never reads them
  c  b with a re-asked turn's fresh tool-use ids (`toolu_s_NN_I_rK`) renamed to the
     clean run's, and the fake's answer counts capped at one: what a cut "up to renaming"
     would give, were it sound
It prints, per equivalence, how many resumed runs reach the clean run's state and how many
model requests their cut would skip; then, for requests that match under none, what
differs (files, the request, the world), most common first. The agent's memory is not
compared: a cut must also show it equal (or be refused), so these are upper bounds.

Run: python bench/convergence_potential.py [--steps 10]   (minutes: every resumed run)
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import posix
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))

FRESH = re.compile(rb"(toolu_s_\d+_\d+)_r\d+")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    n = parser.parse_args().steps

    import faultsim
    import reference_agent
    from faultsim.inprocess import sandbox
    from faultsim.model.fake import FakeClaude
    from faultsim.world.ledger import canonical
    from scaling import scenario_text

    tmp = tempfile.mkdtemp(prefix="faultsim-potential-")
    log = os.path.join(tmp, "requests.log")  # children are forks: they append here
    open(log, "w").close()
    path = Path(tmp) / f"lookups_{n}_steps.toml"
    path.write_text(scenario_text(n))
    scenario = faultsim.load_scenario(path)

    now: dict = {}
    incarnation = sandbox.Explorer.incarnation

    def traced(self, world, *args, **kwargs):
        now.update(ex=self, world=world, run=f"{posix.getpid()}:{id(world)}")
        return incarnation(self, world, *args, **kwargs)

    def digest(data: bytes) -> str:
        return hashlib.blake2b(data, digest_size=12).hexdigest()

    clean: dict = {}
    handle = FakeClaude.handle

    def compared(self, request):
        ex, world = now["ex"], now["world"]
        body = request.content
        try:
            pos = sum(1 for m in json.loads(body).get("messages", [])
                      if m.get("role") == "assistant")
        except ValueError:
            pos = None
        snap = ex.interposer.snapshot()
        files = b"".join(k.encode() + b"\0" + (v or b"D") + b"\0" for k, v in sorted(snap.items()))
        services = "".join(
            name + repr(sorted((k, repr(v)) for k, v in vars(s).items()
                               if not k.startswith("_world")))
            for name, s in sorted(world.services.items()))
        common = (world.clock.now().isoformat() + services
                  + canonical(sorted(world.model._faulted.items())))
        answered = canonical(sorted(world.model._answered.items()))
        capped = canonical(sorted((k, min(v, 1)) for k, v in world.model._answered.items()))
        counts = f"{len(world.ledger.entries)}:{len(world.model.requests)}:{world.incarnation}"
        keys = (digest(files + body + (common + answered + counts).encode()),
                digest(files + body + (common + answered).encode()),
                digest(FRESH.sub(rb"\1", files) + FRESH.sub(rb"\1", body)
                       + (common + capped).encode()))
        renamed = {k: FRESH.sub(rb"\1", v) if v else v for k, v in snap.items()}
        parts = {"request": FRESH.sub(rb"\1", body), "world": common + capped}
        if world.incarnation == 1:
            clean.setdefault(pos, (keys, renamed, parts))
        elif pos in clean:
            base, base_files, base_parts = clean[pos]
            hits = [name for name, x, y in zip("abc", keys, base) if x == y]
            if not hits:
                why = sorted(k for k in set(base_files) | set(renamed)
                             if base_files.get(k) != renamed.get(k))
                why += [k for k in base_parts if base_parts[k] != parts[k]]
                hits = ["differs:" + "+".join(why)]
            fd = posix.open(log, posix.O_WRONLY | posix.O_APPEND)
            posix.write(fd, f"{now['run']} {pos} {' '.join(hits)}\n".encode())
            posix.close(fd)
        return handle(self, request)

    sandbox.Explorer.incarnation, FakeClaude.handle = traced, compared
    try:
        report = faultsim.explore(reference_agent.make_agent, scenario,
                                  crash_model="process", crashes=1, workers=1)
    finally:
        sandbox.Explorer.incarnation, FakeClaude.handle = incarnation, handle
    (run,) = report.runs
    first: dict = {}
    runs, why = set(), collections.Counter()
    for line in open(log):
        who, pos, *hits = line.split()
        runs.add(who)
        for h in hits:
            if h.startswith("differs:"):
                why[h[len("differs:"):]] += 1
            for v in "abc":
                if h == v:
                    first.setdefault((who, v), int(pos))
    requests = n + 1  # the clean run's: one per tool turn, and the final answer
    out = {"steps": n, "resumed": run.judged, "resumed_that_asked": len(runs)}
    print(f"N={n}: {run.judged} resumed runs, {len(runs)} of them sent a model request")
    for v in "abc":
        cut = [pos for (who, vv), pos in first.items() if vv == v]
        out[v] = {"converge": len(cut), "requests_skipped": sum(requests - p for p in cut)}
        print(f"  {v}: {len(cut)} reach the clean run's state; their cut would skip "
              f"{out[v]['requests_skipped']} model requests")
    print("  requests matching under none, by what differs (renamed ids aside):")
    for what, count in why.most_common(8):
        print(f"    {count:5}  {what}")
    out["differs"] = dict(why.most_common(8))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
