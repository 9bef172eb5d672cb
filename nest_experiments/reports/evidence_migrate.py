"""An evidence folder re-exported from its committed tables: an older results format under today's metric names
(``evidence --migrate``), and the within-session metrics its study derives from those tables (``--derive``).

Format 1 -> 2 (issue 54, :data:`nest_experiments.analysis.results.RESULTS_FORMAT`): the metric names say their
true unit (``video.avg_bitrate_bps`` held kbit/s and is ``video.avg_bitrate_kbps``; ``app_rtt_s`` held ms and is
``app_rtt_ms``; ``qdelay.bn1`` is ``qdelay_ms.bn1``; :func:`.results.metric_v2`). The values are the same numbers
in the same units, so the migration renames and converts nothing else:

- ``sessions.csv``: its header (the rows' bytes are kept);
- ``tables/metrics.csv.gz``: the ``metric`` column;
- ``sweep_report/**/summary.csv`` and ``claims.csv``: the ``metric`` (and ``per``) columns; the sweep report's
  Markdown is left as the sweep wrote it (format 1 names; ``evidence.json`` says so);
- ``preregistration.json``: kept byte for byte (its hashes are what was frozen; :func:`.preregistration.marked`
  reads its metric names as renamed, so a rename marks no claim post hoc);
- ``evidence.json``: ``results_format`` 2 and a ``migrated`` note; then ``claims.csv``, ``report.md`` and the
  figures are rebuilt from the committed tables (:func:`.evidence.rebuild`).

``--derive`` (:func:`derive`, issue 53): a study's :class:`~nest_experiments.studies.base.Derived` metrics (each
session's rank correlation of its segments' RTT and size, say) are computed by the same function from the
folder's committed table as ``session_metrics`` computes them from a run folder, and written as ``sessions.csv``
columns (a column already there is compared, not changed); ``evidence.json`` records what was derived and by which
command, and the claims are judged again (:func:`.evidence.rebuild`). Nothing else of the folder changes.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from nest_experiments.analysis.decisions import read_sessions
from nest_experiments.analysis.results import RESULTS_FORMAT, metric_v2
from nest_experiments.errors import NestExpError
from nest_experiments.reports import evidence
from nest_experiments.rundir import write_atomic, write_bytes_atomic, write_json
from nest_experiments.studies import STUDIES

DERIVE_TOLERANCE = 1e-9  # a derived column already in sessions.csv agrees with its recomputation within this

NAME_COLUMNS = ("metric", "per")  # the columns of a table whose cells are metric names


def migrate(folder: Path) -> list[Path]:
    """Re-export the evidence folder ``folder`` in today's results format; returns the files written (none when it
    is in today's format already)."""
    manifest = evidence.read_manifest(folder, any_format=True)
    if manifest.results_format >= RESULTS_FORMAT:
        return []
    written = [p for p in (_rename_header(folder / evidence.SESSIONS),
                           _rename_cells(folder / evidence.TABLES_DIR / "metrics.csv.gz")) if p]
    report_dir = folder / evidence.SWEEP_REPORT_DIR
    for path in sorted([*report_dir.rglob("summary.csv"), *report_dir.rglob("claims.csv")]):
        if _rename_cells(path):
            written.append(path)
    doc: dict[str, Any] = json.loads((folder / evidence.MANIFEST).read_text())
    doc[evidence.FORMAT_KEY] = RESULTS_FORMAT
    doc["migrated"] = [*doc.get("migrated", []), {
        "from": manifest.results_format, "to": RESULTS_FORMAT,
        "by": f"python -m nest_experiments evidence --migrate {folder}",
        "note": "metric names renamed to their true units (issue 54), values unchanged; sweep_report/*.md as the "
                "sweep wrote them (format 1 names)"}]
    write_json(folder / evidence.MANIFEST, doc)
    return [folder / evidence.MANIFEST, *written, *evidence.rebuild(folder)]


def derive(folder: Path) -> list[Path]:
    """Add the study's derived session metrics to ``folder``'s ``sessions.csv`` from its committed tables; returns
    the files written (none when every derived column is there and agrees). A column there that disagrees with its
    recomputation, or a table the folder lacks, is an error naming them."""
    manifest = evidence.read_manifest(folder)
    study = STUDIES[manifest.study]
    sessions = read_sessions(folder / evidence.SESSIONS)
    added = []
    for d in study.derived:
        info = (manifest.tables or {}).get(d.table)
        name = str(info["file"]) if isinstance(info, dict) else f"{evidence.TABLES_DIR}/{d.table}.csv.gz"
        path = folder / name
        if not path.is_file():
            raise NestExpError(f"{folder}: no committed table {d.table!r} ({path.name}) to derive {d.metric} from: "
                               "the folder keeps no per-run rows of it (re-export the sweep with its study's tables)")
        rows = pd.read_csv(path)
        values = {str(run): d.of(group) for run, group in rows.groupby("run", sort=False)}
        column = pd.to_numeric(sessions["run"].astype(str).map(values), errors="coerce")
        if d.metric in sessions.columns:
            old = pd.to_numeric(sessions[d.metric], errors="coerce")
            bad = ~(((old - column).abs() <= DERIVE_TOLERANCE) | (old.isna() & column.isna()))
            if bad.any():
                run = sessions.loc[bad.idxmax(), "run"]
                raise NestExpError(f"{folder}: {evidence.SESSIONS}'s {d.metric} of {run} is not what {path.name} "
                                   "gives again: the column was made by another definition; re-export the sweep")
            continue
        sessions[d.metric] = column
        added.append(d)
    if not added:
        return []
    sessions.to_csv(folder / evidence.SESSIONS, index=False)
    doc: dict[str, Any] = json.loads((folder / evidence.MANIFEST).read_text())
    doc["derived"] = [*doc.get("derived", []), *({
        "metric": d.metric, "from": f"{evidence.TABLES_DIR}/{d.table}.csv.gz",
        "by": f"python -m nest_experiments evidence --derive {folder}",
        "sessions": int(sessions[d.metric].notna().sum())} for d in added)]
    write_json(folder / evidence.MANIFEST, doc)
    return [folder / evidence.SESSIONS, folder / evidence.MANIFEST, *evidence.rebuild(folder)]


def _rename_header(path: Path) -> Path | None:
    if not path.is_file():
        return None
    head, sep, body = path.read_text().partition("\n")
    new = _line([metric_v2(c) for c in next(csv.reader([head]))])
    if new == head:
        return None
    write_atomic(path, new + sep + body)
    return path


def _rename_cells(path: Path) -> Path | None:
    """The metric names of ``path``'s name columns renamed (a ``.gz`` file stays gzip, mtime 0)."""
    if not path.is_file():
        return None
    zipped = path.suffix == ".gz"
    text = gzip.decompress(path.read_bytes()).decode() if zipped else path.read_text()
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return None
    cols = [i for i, name in enumerate(rows[0]) if name in NAME_COLUMNS]
    new = [rows[0], *([metric_v2(c) if i in cols else c for i, c in enumerate(r)] for r in rows[1:])]
    if new == rows:
        return None
    out = io.StringIO()
    csv.writer(out, lineterminator=_terminator(text)).writerows(new)
    if zipped:
        write_bytes_atomic(path, gzip.compress(out.getvalue().encode(), mtime=0))
    else:
        write_atomic(path, out.getvalue())
    return path


def _line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


def _terminator(text: str) -> str:
    return "\r\n" if "\r\n" in text[:4096] else "\n"
