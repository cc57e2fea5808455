"""The layers of faultsim/, read from the source with `ast` (nothing under test is
imported): every module placed in one layer of ARCHITECTURE.md's table and importing only
from its own layer or below; no import cycle (function-level imports included); no private
name imported across modules; the subprocess backend free of the in-process one and of
pyfakefs; the mode-neutral pipeline free of every backend; no backend importing another;
the front ends reaching backends, through any chain of imports, only through
`faultsim/backends.py`; the world free of `real/`; killpoints.py naming no adapter; and a
bottom layer that needs only the standard library."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "faultsim"

# Imported by no faultsim module at import time from the bottom layer: the standard library.
BOTTOM = {"faultsim.errors", "faultsim._version", "faultsim.core.trace", "faultsim.killpoints",
          "faultsim.core.crashmodel", "faultsim.token", "faultsim.interpose.netguard",
          "faultsim.interpose.procguard", "faultsim.interpose.finality", "faultsim.reports.outfile", "faultsim.reports.counts",
          "faultsim.core.classes", "faultsim.host.lifetime"}


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in ROOT.rglob("*.py")}


class Import:
    def __init__(self, source: str, target: str, names: list[str], lazy: bool, line: int):
        self.source, self.target, self.names, self.lazy, self.line = \
            source, target, names, lazy, line

    def __repr__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target}"


def _imports(module: str) -> list[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skipped, in_function = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))  # for type checkers only
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        lazy = id(node) in in_function
        if isinstance(node, ast.Import):
            found += [Import(module, a.name, [], lazy, node.lineno) for a in node.names]
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        names = [a.name for a in node.names]
        submodules = [n for n in names if f"{base}.{n}" in MODULES]
        # `from package import module` imports that module; the package's own __init__ is
        # run by any import of a module inside it, so it is no edge of its own then
        if len(submodules) < len(names) or not submodules:
            found.append(Import(module, base, names, lazy, node.lineno))
        found += [Import(module, f"{base}.{n}", [], lazy, node.lineno) for n in submodules]
    return found


IMPORTS = {m: _imports(m) for m in MODULES}


def _edges(lazy: bool = True) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, imports in IMPORTS.items():
        for imp in imports:
            if imp.target in MODULES and imp.target != module and (lazy or not imp.lazy):
                edges[module].add(imp.target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def _reach(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += edges[m]
    return seen


def _third_party(modules: set[str], lazy: bool) -> dict[str, set[str]]:
    return {m: {i.target.split(".")[0] for i in IMPORTS[m]
                if not i.target.startswith("faultsim") and (lazy or not i.lazy)}
            for m in modules}


ARCHITECTURE = ROOT.parent / "ARCHITECTURE.md"


def _layer_table() -> list[tuple[str, list[str]]]:
    """ARCHITECTURE.md's layer table, bottom first: (layer, the names in its row), each a
    root module (`errors`), a package face (`__init__`) or a folder (`core/`)."""
    import re

    text = ARCHITECTURE.read_text()
    table = text[text.index("<!-- layers: read by tests/test_layers.py -->"):]
    rows = []
    for line in table.splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return rows


def _layer_of() -> dict[str, int]:
    """Each module -> its layer's number: the longest folder of the table that holds it."""
    placed: dict[str, int] = {}
    prefixes: list[tuple[str, int]] = []
    for number, (_, names) in enumerate(_layer_table(), 1):
        for name in names:
            if name.endswith("/"):
                prefixes.append(("faultsim." + name.rstrip("/").replace("/", "."), number))
            else:
                placed["faultsim" if name == "__init__" else f"faultsim.{name}"] = number
    for module in MODULES:
        if module not in placed:
            holders = [(len(p), n) for p, n in prefixes
                       if module == p or module.startswith(p + ".")]
            if holders:
                placed[module] = max(holders)[1]
    return placed


LAYER = _layer_of()


def test_every_module_is_placed_in_one_layer_of_the_map():
    assert sorted(set(MODULES) - set(LAYER)) == []
    assert sorted(set(LAYER) - set(MODULES)) == []  # the map names no module that is gone


def test_no_module_imports_from_a_higher_layer():
    names = [name for name, _ in _layer_table()]
    upward = [f"{imp} ({names[LAYER[imp.source] - 1]} -> {names[LAYER[imp.target] - 1]})"
              for imports in IMPORTS.values() for imp in imports
              if imp.target in MODULES and LAYER[imp.target] > LAYER[imp.source]]
    assert upward == []


def test_no_import_cycle_function_level_imports_included():
    assert _cycles(_edges()) == []


def test_no_private_name_imported_across_modules():
    private = [f"{imp}.{n}" for imports in IMPORTS.values() for imp in imports
               for n in imp.names
               if imp.target.startswith("faultsim") and imp.target != imp.source
               and n.startswith("_") and not n.startswith("__")
               and f"{imp.target}.{n}" not in MODULES]
    assert private == []


def test_the_subprocess_backend_never_imports_the_in_process_one_nor_pyfakefs():
    real = {m for m in MODULES if m.startswith("faultsim.real")}
    # directly, at any level
    direct = [i for m in real for i in IMPORTS[m]
              if i.target.startswith(("faultsim.inprocess", "faultsim.inprocess.explore", "pyfakefs"))]
    assert direct == []
    # nor through what it imports at load time (a fork server loads all of that)
    edges = _edges(lazy=False)
    for m in real:
        reached = _reach(m, edges)
        assert not {r for r in reached if r.startswith(("faultsim.inprocess",
                                                        "faultsim.inprocess.explore"))}, m
        assert "pyfakefs" not in set().union(*_third_party(reached, lazy=False).values()), m


def test_the_pipeline_is_mode_neutral():
    edges = _edges()
    for m in (m for m in MODULES if m.startswith("faultsim.pipeline")):
        reached = _reach(m, _edges(lazy=False))
        assert not {r for r in edges[m] | reached
                    if r.startswith(("faultsim.inprocess", "faultsim.real",
                                     "faultsim.inprocess.explore"))}, m
        assert "pyfakefs" not in set().union(*_third_party(reached, lazy=False).values()), m


def test_the_bottom_layer_needs_only_the_standard_library():
    for m in BOTTOM:
        for imp in IMPORTS[m]:
            top = imp.target.split(".")[0]
            assert imp.target in BOTTOM or (top != "faultsim" and top in
                                            sys.stdlib_module_names), f"{imp}"


def test_the_contract_reaches_no_adapter_and_no_spec_resolution():
    # agent.py is what a user's factory is written against: it must load without any
    # adapter (LangGraph), the loader, or the machinery that runs agents
    direct = {i.target for i in IMPORTS["faultsim.agent"]}  # lazy ones included
    reached = _reach("faultsim.agent", _edges()) | direct
    assert not {r for r in reached if r.startswith(("faultsim.adapters", "faultsim.settings.loading",
                                                    "faultsim.inprocess.explore", "faultsim.inprocess",
                                                    "faultsim.real"))}


def _backend_packages() -> dict[str, str]:
    """Each backend of faultsim/backends.py's table -> the package it lives in (a module
    right under faultsim/ is its own package), read from the source."""
    tree = ast.parse(MODULES["faultsim.backends"].read_text())
    table = next(ast.literal_eval(n.value) for n in ast.walk(tree)
                 if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "BACKENDS"
                                                     for t in n.targets))
    out = {}
    for name, dotted in table.items():
        module = dotted.partition(":")[0]
        assert module in MODULES, (name, dotted)
        parent = module.rpartition(".")[0]
        out[name] = module if parent == "faultsim" else parent
    return out


BACKEND_PACKAGES = _backend_packages()
# the in-process backend's orchestrator lives above its package (explore() is public)
BACKEND_PACKAGES_WIDE = {name: (pkg, "faultsim.inprocess.explore") if name == "in-process" else (pkg,)
                         for name, pkg in BACKEND_PACKAGES.items()}
FRONT_ENDS = ("faultsim.cli", "faultsim.pytest", "faultsim.recorder", "faultsim.replayer")


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_there_are_backends_and_no_backend_imports_another():
    assert {"in-process", "subprocess", "claude-agent-sdk"} <= set(BACKEND_PACKAGES)
    found = []
    for name, own in BACKEND_PACKAGES_WIDE.items():
        others = [p for n, ps in BACKEND_PACKAGES_WIDE.items() if n != name for p in ps
                  if not _under(p, own)]
        for m in (m for m in MODULES if _under(m, (own[0],))):
            found += [f"{imp} ({name} -> another backend)" for imp in IMPORTS[m]
                      if _under(imp.target, others)]
    assert found == []


def test_front_ends_reach_backends_only_through_backends_py():
    # through any chain of imports, lazy ones included: the front end asks
    # faultsim.backends, which loads the backend by its dotted name
    packages = [p for ps in BACKEND_PACKAGES_WIDE.values() for p in ps]
    edges = _edges()
    front = [m for m in MODULES if _under(m, FRONT_ENDS) or m == "faultsim"]
    detours = set()
    for m in front:
        for reached in _reach(m, edges):
            detours |= {reached for t in edges[reached] if _under(t, packages)
                        and not _under(reached, packages)}
    assert sorted(detours) == []  # each module that imports a backend on a front end's way
    # and backends.py itself names them only as strings
    assert not [i for i in IMPORTS["faultsim.backends"] if _under(i.target, packages)]


def test_the_world_imports_nothing_of_real():
    world = [m for m in MODULES if _under(m, ("faultsim.world",))]
    assert world and not [f"{imp}" for m in world for imp in IMPORTS[m]
                          if _under(imp.target, ("faultsim.real",))]


def test_killpoints_names_no_adapter():
    # an adapter's marks get their phases from the adapter (killpoints.register_phases)
    import re

    text = MODULES["faultsim.killpoints"].read_text()
    assert not re.findall(r"mark\.(?!checkpoint\.|tool\.|run\.)[a-z]+\.", text)
    assert "adapters." not in text and "adapters import" not in text


def test_the_in_process_orchestrator_stays_thin():
    # inprocess/explore.py (once engine.py) says what happens in which order and hands
    # each stage to a module of its own; the stages' work does not grow back into it
    lines = MODULES["faultsim.inprocess.explore"].read_text().count("\n")
    assert lines <= 400, f"inprocess/explore.py has {lines} lines"
