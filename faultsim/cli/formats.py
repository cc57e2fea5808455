"""`faultsim formats record` and `check`: the checkpoint-format regression corpus."""
from __future__ import annotations

import argparse

from .exits import EXIT_OK, EXIT_VIOLATION


def _agent_version(spec: str) -> str:
    import importlib
    from importlib import metadata

    module_name = spec.rpartition(":")[0] if ":" in spec else spec
    for name in (module_name, module_name.split(".")[0]):
        try:
            version = getattr(importlib.import_module(name), "__version__", None)
        except Exception:
            version = None
        if version:
            return str(version)
    try:
        return metadata.version(module_name.split(".")[0])
    except metadata.PackageNotFoundError:
        return "unknown"


def cmd_formats_record(ns: argparse.Namespace) -> int:
    from ..loading import load_factory
    from ..formats import record_corpus
    from ..scenario import load_scenario

    factory = load_factory(ns.agent)
    scenario = load_scenario(ns.scenario)
    corpus = record_corpus(factory, scenario, ns.out, agent=ns.check_agent or ns.agent,
                           recorded_by=ns.agent, agent_version=_agent_version(ns.agent),
                           seed=ns.seed, timeout=ns.timeout)
    points = sum(len(e.kill_points) for e in corpus.entries)
    print(f"recorded {len(corpus.entries)} states ({points} kill points, format version"
          f"{'s' if len(corpus.format_versions) != 1 else ''} "
          f"{', '.join(map(str, corpus.format_versions)) or 'none'}) of {scenario.id} by "
          f"{ns.agent} into {corpus.path}")
    return EXIT_OK


def cmd_formats_check(ns: argparse.Namespace) -> int:
    from ..loading import load_factory
    from ..formats import Corpus, check_corpus

    failed = 0
    for path in ns.corpora:
        corpus = Corpus.open(path)
        agent = ns.agent or corpus.agent
        verdicts = check_corpus(load_factory(agent), corpus, timeout=ns.timeout)
        bad = [v for v in verdicts if not v.ok]
        failed += len(bad)
        versions = ", ".join(map(str, corpus.format_versions)) or "none"
        print(f"{path}: {len(verdicts)} recorded states of {corpus.scenario_id} (format "
              f"version {versions}, recorded by {corpus.recorded_by} "
              f"{corpus.agent_version}) resumed by {agent}: "
              + ("ok" if not bad else f"{len(bad)} FAIL"))
        for v in bad[:ns.examples]:
            print("\n" + v.describe())
        if ns.hostile:
            from ..formats.hostile import attack_all
            from ..scenario import load_scenario

            report = attack_all(load_factory(agent), load_scenario(corpus.scenario_path),
                                drawn=ns.hostile, timeout=ns.timeout)
            failed += len(report.failures)
            print(f"{path}: hostile checkpoint files ({len(report.fixed)} fixed, "
                  f"{report.drawn} drawn) given to {agent}: "
                  + ("all refused" if not report.failures else
                     f"{len(report.failures)} FAIL"))
            for v in report.failures[:ns.examples]:
                print(f"\nhostile file {v.case.name!r}: " + "; ".join(v.problems))
    return EXIT_OK if not failed else EXIT_VIOLATION
