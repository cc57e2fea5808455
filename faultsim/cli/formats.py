"""`faultsim formats record` and `check`: the checkpoint-format regression corpus."""
from __future__ import annotations

import argparse

from ..errors import UsageError
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
    from ..backends import python_factory
    from ..formats import record_corpus
    from ..formats.record import check_out
    from ..scenario import load_scenario

    check_out(ns.out)  # before the agent is imported and run: a typo costs nothing
    scenario = load_scenario(ns.scenario)
    factory = python_factory(ns.agent, scenario)  # a Python factory (a backend may refuse)
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
    from ..backends import python_factory
    from ..formats import Corpus, check_corpus
    from ..formats.hostile import NoHostileCases, attack_all
    from ..scenario import load_scenario

    if ns.hostile < 0:
        raise UsageError(f"--hostile {ns.hostile}: expected N >= 0 (drawn cases beside the "
                         "fixed ones)")
    corpora = [Corpus.open(path) for path in ns.corpora]  # every one readable, first
    if ns.show:  # what a check would import and run, from the manifests alone
        for corpus in corpora:
            print("\n".join(corpus.show(ns.agent)))
        return EXIT_OK
    failed = 0
    for path, corpus in zip(ns.corpora, corpora):
        agent = ns.agent or corpus.agent
        factory = python_factory(agent, corpus.scenario_path)  # a backend may refuse
        verdicts = check_corpus(factory, corpus, timeout=ns.timeout)
        bad = [v for v in verdicts if not v.ok]
        failed += len(bad)
        versions = ", ".join(map(str, corpus.format_versions)) or "none"
        print(f"{path}: {len(verdicts)} recorded states of {corpus.scenario_id} (format "
              f"version {versions}, recorded by {corpus.recorded_by} "
              f"{corpus.agent_version}) resumed by {agent}: "
              + ("ok" if not bad else f"{len(bad)} FAIL"))
        for v in bad[:ns.examples]:
            print("\n" + v.describe())
        try:  # --hostile 0 still hands over the fixed cases, as its help says
            report = attack_all(python_factory(agent, corpus.scenario_path),
                                load_scenario(corpus.scenario_path),
                                drawn=ns.hostile, timeout=ns.timeout)
        except NoHostileCases as why:
            print(f"{path}: hostile checkpoint files: not tried: {why}")
        else:
            failed += len(report.failures)
            print(f"{path}: hostile checkpoint files ({len(report.fixed)} fixed, "
                  f"{report.drawn} drawn) given to {agent}: "
                  + ("all refused" if not report.failures else
                     f"{len(report.failures)} FAIL"))
            for v in report.failures[:ns.examples]:
                print(f"\nhostile file {v.case.name!r}: " + "; ".join(v.problems))
    return EXIT_OK if not failed else EXIT_VIOLATION
