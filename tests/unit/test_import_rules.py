"""The house's import rules, read from the map in CONTRIBUTING.md (its import-rules table) and checked on the
source: every module belongs to a row of the table, imports only from its own row and the rows its row may
import, the table draws no circle (so no import runs from a lower layer to a higher one), no module is part of
an import circle, pure rows import nothing of the system side, the studies (found in ``studies/``, not listed)
import no other study, the lines per row are the table's within 10 %, and no package is over 15 % of the lines.

``python -m tests.unit.test_import_rules`` prints each row's lines and share (the table's ``lines`` column)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import nest_experiments

PACKAGE = Path(nest_experiments.__file__).resolve().parent
CONTRIBUTING = PACKAGE.parent / "CONTRIBUTING.md"
BEGIN, END = "<!-- import rules:", "<!-- end of the import rules -->"
SIDES = ("pure", "system", "programs")
EACH_STUDY = "studies.*"  # the table's row for every study: one row per package or module found in studies/
LINES_TOLERANCE = 0.10
MAX_SHARE = 0.15
# house-dash (issue 54, item 2) splits dash/ into sub-packages with dash.core the pure one and moves the learned
# ABR's trainer into training/; until that branch is merged the dash rows and training/ describe a house that
# is not here yet: their checks are expected to fail (strict: a pass would say the marker is stale)
DASH_SPLIT = (PACKAGE / "dash" / "core").is_dir()
IMPORTS_PENDING = set() if DASH_SPLIT else {"dash"}  # dash/ imports config (learned/sim.py) and net (browser.py)
ROWS_PENDING = set() if DASH_SPLIT else {"dash.core", "training"}  # not made yet
SHARE_PENDING = set() if DASH_SPLIT else {"dash"}  # dash/ is 30 % of the lines in one flat folder


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}


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


def studies() -> list[str]:
    """The studies, found: every package or module directly in ``studies/`` but the registry and its base."""
    found = {p.parent.name for p in (PACKAGE / "studies").glob("*/__init__.py")}
    found |= {p.stem for p in (PACKAGE / "studies").glob("*.py")} - {"__init__", "base"}
    return sorted(found)


def read_table(text: str) -> dict[str, tuple[str, frozenset[str], int]]:
    """The import-rules table of CONTRIBUTING.md: row -> (side, the rows it may import, its lines), with
    :data:`EACH_STUDY` made one row per study (each may import what the table says, no other study)."""
    if BEGIN not in text or END not in text:
        raise AssertionError(f"{CONTRIBUTING.name}: no import-rules table ({BEGIN} ... {END})")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows: dict[str, tuple[str, frozenset[str], int]] = {}
    for line in body.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("package", "") or set(cells[0]) <= set("-: "):
            continue
        name, side, allowed, lines = cells
        may = frozenset(re.sub(r"[`\s]", "", allowed).split(",")) - {"", "-", "–"}
        rows[name] = (side, may, int(lines.replace(",", "")))
    if EACH_STUDY in rows:
        side, may, lines = rows.pop(EACH_STUDY)
        rows |= {f"studies.{s}": (side, may, lines) for s in studies()}
    return rows


TABLE = read_table(CONTRIBUTING.read_text())
STUDY_ROWS = {f"studies.{s}" for s in studies()}


def _allowed(row: str) -> frozenset[str]:
    side, may, _ = TABLE[row]
    return (may - {EACH_STUDY}) | (STUDY_ROWS if EACH_STUDY in may else frozenset())


def row_of(module: str) -> str | None:
    """The table's row of ``module``: the longest row name it is, or lies in (``dash.core`` before ``dash``)."""
    name = module.removeprefix("nest_experiments").removeprefix(".") or "__init__"
    hits = [r for r in TABLE if name == r or name.startswith(f"{r}.")]
    return max(hits, key=len) if hits else None


def _pending(pending: set[str]) -> list[object]:
    """Every row, those in ``pending`` expected to fail (strictly) until the house-dash branch is merged."""
    return [pytest.param(r, marks=pytest.mark.xfail(
        strict=True, reason=f"{r}: needs the house-dash branch (dash/ split, dash.core, training/)"))
        if r in pending else r for r in sorted(TABLE)]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def lines_per_row() -> dict[str, int]:
    out = dict.fromkeys(TABLE, 0)
    for m, p in MODULES.items():
        if (row := row_of(m)) is not None:
            out[row] += lines(p)
    return out


def test_every_module_has_its_row_in_the_map() -> None:
    """A new package or root module comes with its line in CONTRIBUTING's table (its rule), or this fails."""
    assert sorted(m for m in MODULES if row_of(m) is None) == []


def test_the_table_is_well_formed() -> None:
    assert {side for side, _, _ in TABLE.values()} <= set(SIDES)
    unknown = {(r, i) for r in TABLE for i in _allowed(r) if i not in TABLE}
    assert sorted(unknown) == []


def test_the_table_draws_no_circle() -> None:
    """The rows' may-import draw a graph without a circle: each row has a layer (1 + the highest it may import),
    and every import allowed runs from a higher layer to a lower one."""
    layers: dict[str, int] = {}
    todo = dict.fromkeys(TABLE)
    while todo:
        ready = [r for r in todo if _allowed(r) - {r} <= set(layers)]
        assert ready, f"a circle among {sorted(todo)}"
        for r in ready:
            layers[r] = 1 + max((layers[i] for i in _allowed(r) - {r}), default=0)
            del todo[r]
    assert all(layers[i] < layers[r] for r in TABLE for i in _allowed(r) - {r})


def test_pure_rows_may_import_nothing_of_the_system_side() -> None:
    pure = [r for r, (side, _, _) in TABLE.items() if side == "pure"]
    assert sorted((r, i) for r in pure for i in _allowed(r) if TABLE[i][0] == "system") == []


@pytest.mark.parametrize("row", _pending(IMPORTS_PENDING))
def test_each_row_imports_only_what_the_map_allows(row: str) -> None:
    """Imports within a row are free; across rows only to the rows its line of the table names."""
    bad = sorted((m, i) for m in GRAPH if row_of(m) == row for i in GRAPH[m]
                 if (to := row_of(i)) != row and to not in _allowed(row))
    assert bad == []


NOT_FROM_DASH = ("net", "vm", "apps", "collectors", "runs", "analysis", "studies", "training")  # dash imports none


def _within(module: str, packages: tuple[str, ...]) -> bool:
    name = module.removeprefix("nest_experiments.")
    return any(name == p or name.startswith(p + ".") for p in packages)


def _violations(froms: tuple[str, ...], tos: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every import from a module of ``froms`` (packages, with their sub-packages) to one of ``tos``."""
    return sorted((m, i) for m in GRAPH if _within(m, froms) for i in GRAPH[m] if _within(i, tos))


def test_dash_imports_nothing_of_the_system_side_the_analysis_or_training() -> None:
    assert _violations(("dash",), NOT_FROM_DASH) == []
    assert _violations(("dash.content",), ("dash.core", "dash.http", "dash.origin", "dash.players")) == []
    assert _violations(("dash.core",), ("dash.http", "dash.origin", "dash.players")) == []
    assert _violations(("dash.http",), ("dash.origin", "dash.players")) == []


def test_no_study_imports_another() -> None:
    """Implied by the rows (no study's row may import another's), checked on its own: the rule the studies keep."""
    bad = [(m, i) for m in GRAPH if row_of(m) in STUDY_ROWS for i in GRAPH[m]
           if row_of(i) in STUDY_ROWS and row_of(i) != row_of(m)]
    assert bad == []


def test_the_studies_found_are_the_registry_s() -> None:
    from nest_experiments.studies import STUDIES

    assert set(studies()) == set(STUDIES)


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


@pytest.mark.parametrize("row", _pending(ROWS_PENDING))
def test_the_rules_see_the_modules_they_judge(row: str) -> None:
    """A rule over no module would pass for nothing: every row of the table has modules."""
    assert any(row_of(m) == row for m in MODULES)


def test_the_run_folder_contract_imports_only_the_root() -> None:
    """rundir (and its row schemas) is below everything that writes or reads a run folder: the players (dash), the
    apps, the analysis; it imports only the exception tree."""
    assert {i for m in GRAPH if _within(m, ("rundir",)) for i in GRAPH[m] if not _within(i, ("rundir",))} == \
        {"nest_experiments.errors"}


def test_the_graph_has_the_edges_the_rules_are_about() -> None:
    assert {"nest_experiments.analysis.report", "nest_experiments.studies.racing.sessions",
            "nest_experiments.net.network", "nest_experiments.runs.runner", "nest_experiments.config.sweep",
            "nest_experiments.dash.core.player", "nest_experiments.training.sim"} <= set(GRAPH)
    assert "nest_experiments.rundir" in GRAPH["nest_experiments.collectors.cpu"]
    assert "nest_experiments.net.network" in GRAPH["nest_experiments.runs.runner"]
    assert row_of("nest_experiments.studies.racing.sessions") == "studies.racing"
    assert row_of("nest_experiments.studies") == "studies" and row_of("nest_experiments") == "__init__"


def test_the_lines_per_row_are_the_map_s_within_10_percent() -> None:
    """The table's ``lines`` column (print it: ``python -m tests.unit.test_import_rules``), within 10 %; a study's
    line in the table counts every study."""
    got = lines_per_row()
    got_rows = {r: n for r, n in got.items() if r not in STUDY_ROWS} | {EACH_STUDY: sum(got[r] for r in STUDY_ROWS)}
    want = {r: n for r, (_, _, n) in TABLE.items() if r not in STUDY_ROWS}
    want[EACH_STUDY] = next(iter(TABLE[r][2] for r in STUDY_ROWS), 0)
    off = {r: (want[r], n) for r, n in got_rows.items() if abs(n - want[r]) > LINES_TOLERANCE * max(want[r], 1)}
    assert off == {}, f"(the table's, now's) lines: {off}"


def shares(row: str) -> dict[str, float]:
    """The shares of the package's lines of ``row`` (a study is a row of its own); a row over :data:`MAX_SHARE`
    counts as its sub-packages and the rest of its modules together (so a split dash/ is judged by its parts)."""
    total = sum(lines(p) for p in MODULES.values())
    mine = {m: p for m, p in MODULES.items() if row_of(m) == row}
    if sum(lines(p) for p in mine.values()) <= MAX_SHARE * total:
        return {row: sum(lines(p) for p in mine.values()) / total}
    parts: dict[str, int] = {}
    for m, p in mine.items():
        rest = m.removeprefix(f"nest_experiments.{row}").lstrip(".")
        sub = rest.split(".")[0] if "." in rest or (p.name == "__init__.py" and rest) else ""
        key = f"{row}.{sub}" if sub else f"{row} (its own modules)"
        parts[key] = parts.get(key, 0) + lines(p)
    return {k: n / total for k, n in parts.items()}


@pytest.mark.parametrize("row", _pending(SHARE_PENDING))
def test_no_package_is_over_15_percent_of_the_lines(row: str) -> None:
    assert {k: round(v, 3) for k, v in shares(row).items() if v > MAX_SHARE} == {}


def _takes_namespace(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.arg) and n.annotation is not None and
               re.search(r"(?<!Simple)Namespace\b", ast.unparse(n.annotation)) for n in ast.walk(tree))


def test_no_argparse_namespace_past_the_command_line() -> None:
    """Only a module that declares command-line options (``add_argument``: cli.py, a player's own program) takes
    an ``argparse.Namespace``; the library gets typed requests (``runs.request.RunRequest``)."""
    texts = {m: p.read_text() for m, p in MODULES.items()}
    assert [m for m, t in texts.items() if _takes_namespace(ast.parse(t)) and ".add_argument(" not in t] == []


if __name__ == "__main__":
    total = sum(lines(p) for p in MODULES.values())
    per_row = lines_per_row()
    print(f"{'row':16} {'lines':>6} {'share':>6}")
    for row, n in per_row.items():
        if row not in STUDY_ROWS:
            print(f"{row:16} {n:6d} {n / total:6.1%}")
    print(f"{EACH_STUDY:16} {sum(per_row[r] for r in STUDY_ROWS):6d}  (" +
          ", ".join(f"{r.removeprefix('studies.')} {per_row[r] / total:.1%}" for r in sorted(STUDY_ROWS)) + ")")
    print(f"{'total':16} {total:6d}")
    print("over 15 %:", {k: f"{v:.1%}" for r in TABLE for k, v in shares(r).items() if v > MAX_SHARE} or "none")
