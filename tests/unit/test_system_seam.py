"""The system seam's import rules: net/ imports nothing above it, the pure modules of the run's orchestration
import nothing of the system side at module level, and the configuration imports no app (config.kinds names them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nest_experiments

PACKAGE = Path(nest_experiments.__file__).resolve().parent
ABOVE_NET = ("apps", "collectors", "runner", "launch", "cluster", "cluster_task", "sweep_in_vm", "runtime",
             "preflight", "analysis", "studies", "dash", "vm", "pytest_plugin", "cli", "doctor", "traceplay")


def _imports(path: Path) -> set[str]:
    """Every nest_experiments module ``path`` imports, anywhere in it (functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nest_experiments"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("nest_experiments")}
    return out


def _top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("path", sorted((PACKAGE / "net").glob("*.py")), ids=lambda p: p.name)
def test_net_imports_nothing_above_it(path: Path) -> None:
    assert {m for m in _imports(path) if _top(m) in ABOVE_NET} == set()


@pytest.mark.parametrize("path", sorted((PACKAGE / "config").glob("*.py")), ids=lambda p: p.name)
def test_the_config_imports_no_app_collector_or_system_module(path: Path) -> None:
    assert {m for m in _imports(path) if _top(m) in ("apps", "collectors", "net", "runner", "vm")} == set()


def test_the_orchestration_below_the_cli_imports_nothing_above_it() -> None:
    """The one upward arrow was launch -> cluster -> cluster_task -> launch; the runner, what it produces and
    the runtime import none of the commands."""
    for name, above in (("cluster_task", {"launch", "cluster"}), ("cluster", {"launch"}),
                        ("runner", {"launch", "cluster", "cluster_task", "sweep_in_vm"}),
                        ("outcome", {"runner", "launch", "cluster", "cluster_task"}),
                        ("runtime", {"runner", "launch", "cluster", "cluster_task", "sweep_in_vm", "apps"})):
        found = {m for m in _imports(PACKAGE / f"{name}.py") if _top(m) in above}
        assert found == set(), f"{name} imports {found}"
