"""The analysis side's import rules, read from the source: what happens after a run imports nothing of the system
side, has no import circle, and no study imports another."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nest_experiments"
SYSTEM = ("net", "procs", "vm", "apps", "collectors", "runner")  # modules and packages that touch the system
ANALYSIS = ("analysis", "studies", "rundir", "results")
STUDIES = ("nest", "abr_quic", "under_hood", "h2quic", "racing", "generic")


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every nest_experiments module ``path`` imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n.startswith("nest_experiments")}
    return out


GRAPH = {m: {i for i in _imports(p) if i != m} for m, p in MODULES.items()}


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == f"nest_experiments.{n}" or module.startswith(f"nest_experiments.{n}.") for n in names)


def _reaches(start: str, goal: str) -> bool:
    seen, todo = set(), [i for i in GRAPH.get(start, ()) if i in GRAPH]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m not in seen:
            seen.add(m)
            todo += [i for i in GRAPH[m] if i in GRAPH]
    return False


def test_the_analysis_side_imports_nothing_of_the_system_side() -> None:
    bad = [(m, i) for m in GRAPH if _under(m, ANALYSIS) for i in GRAPH[m] if _under(i, SYSTEM)]
    assert bad == []


def test_the_analysis_side_has_no_import_circle() -> None:
    circles = [m for m in GRAPH if _under(m, ANALYSIS) and _reaches(m, m)]
    assert circles == []


def test_no_study_imports_another() -> None:
    def study(m: str) -> str | None:
        return next((s for s in STUDIES if _under(m, (f"studies.{s}",))), None)
    bad = [(m, i) for m in GRAPH if study(m) for i in GRAPH[m] if study(i) not in (None, study(m))]
    assert bad == []


def test_the_rules_see_the_modules_they_judge() -> None:
    # a rule over no module would pass for nothing
    assert {"nest_experiments.analysis.report", "nest_experiments.studies.racing.sessions",
            "nest_experiments.collectors.cpu"} <= set(GRAPH)
    assert "nest_experiments.rundir" in GRAPH["nest_experiments.collectors.cpu"]
