"""tcperf's layers, read from its source: no import cycle anywhere, and no module below the features imports one.

    commands, cli -> features (advisor, ladder, generate, totarget, distributed, report, lab)
                  -> engine, worker, runner -> recipes, quant, ops, accuracy, source, layers, kernels
                  -> timing, precision, store, env, spec, errors

Every import counts, those inside functions too (a lazy import is still a dependency). Importing a package's
module runs the package's __init__ first, so `from . import x` inside a package is an edge to that __init__.
Also here: every worker task registered in tcperf.tasks resolves, so a rename fails this test, not a GPU call.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tcperf import tasks

ROOT = Path(__file__).resolve().parent.parent / "tcperf"
FEATURES = ("advisor", "ladder", "generate", "totarget", "distributed", "report", "lab", "commands", "cli",
            "__main__")


def _modules() -> dict[str, tuple[Path, bool]]:
    """'tcperf.engine' -> (path, is a package __init__)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _targets(node, module: str, is_package: bool, modules) -> list[str]:
    """The tcperf modules an import statement loads (the longest known prefix of each name)."""
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
        if name.startswith("tcperf"):
            found.append(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= {t for t in _targets(node, module, is_package, modules) if t != module}
    return graph


def is_feature(module: str) -> bool:
    return module.split(".")[1] in FEATURES if module.count(".") else False


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


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_no_module_below_the_features_imports_one():
    climbs = [f"{m} -> {t}" for m, targets in import_graph().items() if m != "tcperf" and not is_feature(m)
              for t in sorted(targets) if is_feature(t)]
    assert climbs == []


def test_the_walk_sees_imports_inside_functions(tmp_path):
    """The checks above would pass on a walk that saw nothing: show they see a lazy import."""
    graph = import_graph()
    assert "tcperf.runner" in graph["tcperf.engine"]           # engine.run imports the runner inside the function
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_every_registered_worker_task_resolves(name):
    assert callable(tasks.resolve(name))


def test_an_unknown_task_is_named():
    with pytest.raises(KeyError, match="unknown worker task 'nope'"):
        tasks.path_of("nope")
