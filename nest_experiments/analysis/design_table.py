"""The design table of a sweep or an evidence folder: the paper's set-up, ours, why different, expected effect.

Read from a run's own ``config.toml`` (its ``[[design]]`` rows, resolved as the
run was: :func:`nest_experiments.config.design.lines`), kept in an evidence
folder as ``design.json`` (:data:`DESIGN_FILE`), drawn as one Markdown table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from nest_experiments.analysis import markdown as md
from nest_experiments.config.design import DesignLine, departs, lines
from nest_experiments.errors import ConfigError
from nest_experiments.rundir import RunFolder, write_atomic

DESIGN_FILE = "design.json"
HEADING = "## The paper's design and ours"


def records(found: Sequence[DesignLine]) -> list[dict[str, Any]]:
    """Each line as a plain record (what ``design.json`` holds)."""
    return [{"item": d.row.item, "paper": d.row.paper, "unit": d.row.unit, "source": d.row.source, "key": d.row.key,
             "ours": d.ours, "departs": d.departs, "why": d.reason, "effect": d.row.effect,
             "claims": list(d.row.claims)} for d in found]


def _lines_of(run_dir: Path) -> list[DesignLine]:
    try:
        raw = RunFolder(run_dir).config()
    except (OSError, ValueError):
        return []
    try:
        return lines(raw)
    except ConfigError:  # a folder written by an older version whose rows no longer read
        return []


def of_folder(runs: Sequence[Path]) -> list[dict[str, Any]]:
    """The design of a sweep: each row with ours over all its runs (a swept key's run has one value of the axis:
    the sweep's ours is every value its runs had, in the paper's order where the paper lists values, else as
    the runs had them), and whether that departs from the paper."""
    merged: list[DesignLine] = []
    seen: list[list[Any]] = []
    for run_dir in runs:
        found = _lines_of(run_dir)
        if not found:
            continue
        if not merged:
            merged, seen = list(found), [[] for _ in found]
        for i, line in enumerate(found[:len(merged)]):
            for v in line.ours if isinstance(line.ours, list) else [line.ours]:
                if v not in seen[i]:
                    seen[i].append(v)
    out = []
    for line, values in zip(merged, seen, strict=True):
        _in_paper_order(values, line.row.paper)  # (the runs' order is the blocks' random one)
        ours = values[0] if len(values) == 1 and not isinstance(line.ours, list) else values
        out.append(replace(line, ours=ours, departs=line.row.stated and departs(line.row.paper, ours)))
    return records(out)


def merged(earlier: Sequence[Mapping[str, Any]], later: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One design of runs made in two parts (an evidence folder gone on from with ``--continue-from``): per item
    ours over both (as :func:`of_folder` merges runs) and departing when either part departed. Items only one
    part has keep its record; with no earlier part, the later one."""
    if not earlier:
        return [dict(r) for r in later]
    by_item = {r["item"]: r for r in later}
    out = []
    for old in earlier:
        new = by_item.pop(old["item"], None)
        if new is None:
            out.append(dict(old))
            continue
        values = [*_as_list(old["ours"])]
        values += [v for v in _as_list(new["ours"]) if v not in values]
        _in_paper_order(values, old["paper"])
        single = not isinstance(old["ours"], list) and not isinstance(new["ours"], list) and len(values) == 1
        out.append({**new, "ours": values[0] if single else values, "departs": bool(old["departs"] or new["departs"])})
    return out + [dict(r) for r in by_item.values()]


def _in_paper_order(values: list[Any], paper: Any) -> None:
    """Sort ``values`` in the order the paper lists its values (a value it does not list goes last)."""
    if isinstance(paper, list):
        order = [str(p) for p in paper]
        values.sort(key=lambda v: order.index(str(v)) if str(v) in order else len(order))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def write(folder: Path, found: Sequence[Mapping[str, Any]]) -> Path:
    path = folder / DESIGN_FILE
    write_atomic(path, json.dumps(list(found), indent=1, sort_keys=True) + "\n")
    return path


def read(folder: Path) -> list[dict[str, Any]]:
    path = folder / DESIGN_FILE
    return list(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else []


def _value(value: Any, unit: str) -> str:
    if isinstance(value, Mapping):  # a value per case (http_server per transport): "tcp: webfs; h3: caddy"
        return "; ".join(f"{k}: {_value(v, unit)}" for k, v in value.items())
    text = ", ".join(_value(v, "") for v in value) if isinstance(value, list) else str(value)
    return f"{text} {unit}".strip()


def section(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's section: a summary line, then one row per item (departures first); none without rows."""
    if not found:  # an experiment file with no [[design]] rows, or evidence made before them: nothing to draw
        return []
    departures = [r for r in found if r["departs"]]
    rows = sorted(found, key=lambda r: not r["departs"])
    body = [[("**" + r["item"] + "**") if r["departs"] else r["item"], _value(r["paper"], r["unit"]),
             _value(r["ours"], r["unit"]), r["why"] or "—",
             (r["effect"] + (f" ({', '.join(r['claims'])})" if r["claims"] else "")) or "—",
             r["source"] or "—"] for r in rows]
    lead = (f"{len(departures)} of {len(found)} items depart from the paper's design in these runs"
            + (f": {', '.join(r['item'] for r in departures)}." if departures else "."))
    return [HEADING, "", lead, "", *md.table(["item", "paper", "ours", "why different", "expected effect (claims)",
                                              "the paper's words"], body)]


__all__ = ["DESIGN_FILE", "HEADING", "merged", "of_folder", "read", "records", "section", "write"]
