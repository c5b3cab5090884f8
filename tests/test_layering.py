"""tcperf's layers, read from its source and from docs/design.md: no import cycle anywhere; every module in a tier;
no import that climbs a tier; no string below the features that names a feature module.

    commands -> features (advisor, ladder, generate, totarget, distributed, report, lab) -> engine, worker, runner
             -> mechanisms (recipes, ops, kernels, source, ...) -> base (records, timing, precision, store, ...)

Every import counts, those inside functions too (a lazy import is still a dependency). Importing a package's module
runs the package's __init__ first, so `from . import x` inside a package is an edge to that __init__. A worker is
handed the function it runs (tcperf.records sends its module and qualified name), so no string in the core may
name a feature: such a registry hides the edge from this walk. Each check is shown to fail on a tree made to break
it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "tcperf"
DESIGN = ROOT.parent / "docs" / "design.md"


# --- the tree: modules and their imports -------------------------------------------------------------------------
def modules_of(root: Path) -> dict[str, tuple[Path, bool]]:
    """'tcperf.engine' -> (path, is a package __init__)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _targets(node, module: str, is_package: bool, modules) -> list[str]:
    """The tcperf modules an import statement loads (the longest known prefix of each name)."""
    top = next(iter(modules)).split(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        stem = ".".join(p for p in (base if node.level else "", node.module or "") if p)
        names = [f"{stem}.{a.name}" for a in node.names]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith(top):
            found.append(name)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = modules_of(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= {t for t in _targets(node, module, is_package, modules) if t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# --- the tiers of docs/design.md ------------------------------------------------------------------------------------
def tiers_of(design: str) -> list[tuple[str, set[str]]]:
    """The 'Layers' block: [(tier, {entry, ...}), ...] top to bottom; an entry is a module ('engine') or a package
    ('advisor'); a line that starts with spaces continues the tier above."""
    block = design.split("## Layers", 1)[1].split("```")[1]
    tiers: list[tuple[str, set[str]]] = []
    for line in block.strip("\n").splitlines():
        words = line.split()
        if not line.startswith("  "):
            tiers.append((words.pop(0), set()))
        tiers[-1][1].update(w.removesuffix(".py").rstrip("/") for w in words if w.endswith((".py", "/")))
    return tiers


def tier_of(module: str, tiers) -> int | None:
    """The index of the module's tier (0 the top); None when it is in none."""
    parts = module.split(".")
    entry = parts[1] if len(parts) > 1 else "__init__"
    return next((i for i, (_, entries) in enumerate(tiers) if entry in entries), None)


def climbs(graph: dict[str, set[str]], tiers) -> list[str]:
    """Imports from a module to one in a tier above it."""
    return [f"{m} ({tiers[tier_of(m, tiers)][0]}) -> {t} ({tiers[tier_of(t, tiers)][0]})"
            for m, targets in sorted(graph.items()) for t in sorted(targets)
            if tier_of(m, tiers) is not None and tier_of(t, tiers) is not None and tier_of(t, tiers) < tier_of(m, tiers)]


def feature_strings(root: Path, tiers) -> list[str]:
    """String constants (docstrings aside) in modules below the features that name a feature module:
    'tcperf.ladder', 'tcperf.advisor.probe:Probe', 'commands.ceilings:measure_ceiling'."""
    at = [name for name, _ in tiers].index("features")
    features = "|".join(sorted(set().union(*(entries for _, entries in tiers[:at + 1])) - {"__init__"}))
    named = re.compile(rf"tcperf\.({features})\b|^({features})(\.\w+)*:\w+$")
    found = []
    for module, (path, _) in modules_of(root).items():
        if tier_of(module, tiers) is None or tier_of(module, tiers) <= at:
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef,
                ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        found += [f"{module}:{n.lineno}: {n.value!r}" for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and id(n) not in docs and named.search(n.value.strip())]
    return found


TIERS = tiers_of(DESIGN.read_text())


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_every_module_is_in_a_tier_of_the_design():
    assert [m for m in modules_of(ROOT) if tier_of(m, TIERS) is None] == []


def test_no_import_climbs_a_tier():
    assert climbs(import_graph(), TIERS) == []


def test_no_string_below_the_features_names_a_feature_module():
    assert feature_strings(ROOT, TIERS) == []


def test_the_walk_sees_imports_inside_functions():
    """The checks above would pass on a walk that saw nothing: show they see a lazy import."""
    assert "tcperf.profiler" in import_graph()["tcperf.engine"]       # engine._profile imports it in the function
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


# --- each check fails where it should ----------------------------------------------------------------------------------
BROKEN = {  # a small tree that breaks each rule once
    "__init__.py": "",
    "base.py": "def helper():\n    from . import engine  # climbs\n",
    "engine.py": "'''Docstrings may name tcperf.ladder.'''\nTASKS = {'cell': 'tcperf.ladder:cell_task'}\n",
    "ladder.py": "from . import engine\n",
    "stray.py": "",
}
DESIGN_OF_BROKEN = "## Layers\n```\n features    ladder.py __init__.py\n engine      engine.py\n base        base.py\n```\n"


@pytest.fixture
def broken(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    for name, text in BROKEN.items():
        (root / name).write_text(text)
    return root, tiers_of(DESIGN_OF_BROKEN)


def test_a_climbing_import_a_feature_string_and_a_stray_module_are_each_caught(broken):
    root, tiers = broken
    assert climbs(import_graph(root), tiers) == ["pkg.base (base) -> pkg.engine (engine)"]
    assert [s.split(": ", 1)[1] for s in feature_strings(root, tiers)] == ["'tcperf.ladder:cell_task'"]
    assert [m for m in modules_of(root) if tier_of(m, tiers) is None] == ["pkg.stray"]
