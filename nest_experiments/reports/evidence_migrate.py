"""An evidence folder of an older results format, re-exported under today's metric names (``evidence --migrate``).

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
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

from nest_experiments.analysis.results import RESULTS_FORMAT, metric_v2
from nest_experiments.reports import evidence
from nest_experiments.rundir import write_atomic, write_bytes_atomic, write_json

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
