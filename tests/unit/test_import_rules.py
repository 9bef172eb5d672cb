"""The house's import rules, read from the source (CONTRIBUTING.md draws the map): the pure core and the analysis
import nothing of the system side, net/ imports nothing above it, no study imports another, no module is part of
an import circle, and the package root holds only the entry points."""

from __future__ import annotations

import ast
from pathlib import Path

import nest_experiments

PACKAGE = Path(nest_experiments.__file__).resolve().parent
SYSTEM = ("net", "vm", "apps", "collectors", "runs", "pytest_plugin", "cli")  # what touches the system, or runs it
PURE = ("errors", "units", "rundir", "resources", "results", "config", "parsers", "analysis", "studies")
ABOVE_NET = ("apps", "collectors", "runs", "analysis", "studies", "dash", "vm", "pytest_plugin", "cli")
STUDIES = ("nest", "abr_quic", "under_hood", "h2quic", "racing", "generic")
ROOT = {"__init__", "__main__", "cli", "errors", "units", "resources", "results", "pytest_plugin"}
ROOT_PACKAGES = ("rundir",)  # a contract of the root with a module below it (rundir.rows: the row schemas)


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every nest_experiments module ``path`` imports: at the top, inside a function, or for types only."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n in MODULES}
    return out


GRAPH = {m: {i for i in _imports(p) if i != m} for m, p in MODULES.items()}


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == f"nest_experiments.{n}" or module.startswith(f"nest_experiments.{n}.") for n in names)


def _violations(importers: tuple[str, ...], banned: tuple[str, ...]) -> list[tuple[str, str]]:
    return sorted((m, i) for m in GRAPH if _under(m, importers) for i in GRAPH[m] if _under(i, banned))


def test_the_pure_core_and_the_analysis_import_nothing_of_the_system_side() -> None:
    assert _violations(PURE, SYSTEM) == []


def test_net_imports_nothing_above_it() -> None:
    assert _violations(("net",), ABOVE_NET) == []


def test_no_study_imports_another() -> None:
    def study(m: str) -> str | None:
        return next((s for s in STUDIES if _under(m, (f"studies.{s}",))), None)
    bad = [(m, i) for m in GRAPH if study(m) for i in GRAPH[m] if study(i) not in (None, study(m))]
    assert bad == []


def _circle_through(start: str) -> list[str] | None:
    """An import path from ``start`` back to itself, if there is one."""
    todo, seen = [(i, [start, i]) for i in GRAPH[start]], set()
    while todo:
        m, path = todo.pop()
        if m == start:
            return path
        if m not in seen:
            seen.add(m)
            todo += [(i, [*path, i]) for i in GRAPH[m]]
    return None


def test_no_module_is_in_an_import_circle() -> None:
    assert [c for m in sorted(GRAPH) if (c := _circle_through(m))] == []


def test_the_package_root_holds_only_the_entry_points() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == ROOT
    assert all((PACKAGE / p / "__init__.py").is_file() for p in ROOT_PACKAGES)


def test_the_run_folder_contract_imports_only_the_root() -> None:
    """rundir (and its row schemas) is below everything that writes or reads a run folder: the players (dash), the
    apps, the analysis; it imports only the exception tree."""
    assert {i for m in GRAPH if _under(m, ("rundir",)) for i in GRAPH[m] if not _under(i, ("rundir",))} == \
        {"nest_experiments.errors"}


def test_the_rules_see_the_modules_they_judge() -> None:
    """A rule over no module would pass for nothing: the graph has the modules and edges the rules are about."""
    assert {"nest_experiments.analysis.report", "nest_experiments.studies.racing.sessions",
            "nest_experiments.net.network", "nest_experiments.runs.runner", "nest_experiments.config.sweep"} <= set(GRAPH)
    assert "nest_experiments.rundir" in GRAPH["nest_experiments.collectors.cpu"]
    assert "nest_experiments.net.network" in GRAPH["nest_experiments.runs.runner"]
    assert _violations(("runs",), ("net",))  # the orchestration does use the seam: the check can see such edges
