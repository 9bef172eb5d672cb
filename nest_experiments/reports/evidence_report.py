"""An evidence folder's ``report.md`` and its figure, and the README's row of one claim (:mod:`.evidence`).

Everything here reads the committed tables only (``sessions.csv``, ``claims.csv``'s verdicts, ``runs.json``,
``evidence.json``), so the same folder gives the same report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402

from nest_experiments.analysis import decisions, design_table, results  # noqa: E402
from nest_experiments.analysis import sequential as seq  # noqa: E402
from nest_experiments.analysis.claims import Sample, Verdict, more_text, sample  # noqa: E402
from nest_experiments.analysis.results import DASH_METRICS  # noqa: E402
from nest_experiments.analysis.timeline import number as _num  # noqa: E402
from nest_experiments.rundir import SWEEP_LOG  # noqa: E402
from nest_experiments.studies import STUDIES  # noqa: E402

UNITS = {m.key: m.unit for m in DASH_METRICS}
PANEL_COLUMNS = 4


def unit_of(metric: str) -> str:
    """The unit ``sessions.csv`` holds ``metric`` in: the shared report's, else the one its name ends in (else "")."""
    return UNITS.get(metric) or results.unit_of(metric)


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def _text(x: Any) -> str:
    """A field of claims.csv as text: missing (None, NaN, empty) is ""."""
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


# ---------------------------------------------------------------- one claim's row (README)


def claim_row(row: Mapping[str, Any]) -> list[str]:
    """A ``claims.csv`` row as the README's cells: claim, paper's number, ours, level, n, verdict."""
    return [*claim_cells(row), _ours(row), level_cell(row), _n(row), _verdict(row)]


def level_cell(row: Mapping[str, Any]) -> str:
    """The level the claim was judged at (Holm's share of its family, spent at its look): "0.0023 (13 of 15
    open, look 1)"."""
    alpha, open_, size, look = (_num(row.get(k)) for k in ("alpha", "family_open", "family_size", "look"))
    if alpha is None:
        return "—"
    if open_ is None or size is None:
        return f"{alpha:.2g}"
    return f"{alpha:.2g} ({int(open_)} of {int(size)} open" + (f", look {int(look)})" if look is not None else ")")


def claim_cells(row: Mapping[str, Any]) -> list[str]:
    """A claim's first two cells: the claim (statement, figure, id) and the paper's number."""
    claim = f"{row['statement']} ({row['figure']}; `{row['id']}`)"
    source = _text(row.get("margin_source")).split(":", 1)[0]
    margin = _num(row.get("margin"))
    if margin is not None and source:
        claim += f"; margin {_margin(row, margin)} ({source})"
    if _text(row.get("post_hoc")):
        claim += f"; **post hoc**: {_text(row.get('post_hoc'))}"
    return [_cell(claim), _cell(_text(row.get("paper_value")) or "—")]


def _margin(row: Mapping[str, Any], margin: float) -> str:
    relative = row.get("scale") == "ratio" or str(row.get("margin_relative", "")).lower() == "true"
    return f"{margin:.0%}" if relative else _fmt(margin)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _ours(row: Mapping[str, Any]) -> str:
    effect, low, high = (_num(row.get(k)) for k in ("effect", "ci_low", "ci_high"))
    if effect is None:
        return "—"
    ratio = row.get("scale") == "ratio"
    pre, unit = ("x", "") if ratio else ("", unit_of(str(row["metric"])))
    if _text(row.get("share")):
        unit = f"of the {'pairs' if _text(row.get('b')) else 'sessions'} (paper {_fmt(_num(row.get('paper_share')) or 0)})"
    elif _text(row.get("per")) and unit:
        unit = f"{unit} per {unit_of(str(row['per'])) or row['per']}"
    text = f"{pre}{_fmt(effect)}"
    level = _num(row.get("ci_level"))
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        text += " (no CI at this n)"
    else:
        text += f" [{pre}{_fmt(low)}, {pre}{_fmt(high)}]" + (f" ({level:.1%} CI)" if level is not None else "")
    text += f" {unit}" if unit else ""
    all_n, all_effect, all_low, all_high = (_num(row.get(k)) for k in ("all_n", "all_effect", "all_ci_low",
                                                                          "all_ci_high"))
    if all_n is not None and all_effect is not None:  # decided at an earlier look: the same CI on all sessions
        span = f" [{pre}{_fmt(all_low)}, {pre}{_fmt(all_high)}]" if all_low is not None and all_high is not None \
            and math.isfinite(all_low) and math.isfinite(all_high) else " (no CI)"
        text += f"; on all {int(all_n)}: {pre}{_fmt(all_effect)}{span}"
    return text


def _n(row: Mapping[str, Any]) -> str:
    pairs, n_a, n_b = (_num(row.get(k)) for k in ("n_pairs", "n_a", "n_b"))
    if pairs is not None:
        unit = "sessions"  # b empty: one sample; a worst case over cells: one value per block
        if _text(row.get("worst_over")):
            unit = _text(row.get("more_unit")) or "blocks"
        text = f"{int(pairs)} pairs" if _text(row.get("b")) else f"{int(n_a or 0)} {unit}"
    else:
        text = f"{int(n_a or 0)} / {int(n_b or 0)} sessions"
    saturated = _num(row.get("saturated_excluded"))
    return text + (f" ({int(saturated)} saturated out)" if saturated else "")


def _verdict(row: Mapping[str, Any]) -> str:
    verdict = str(row["verdict"])
    more = _num(row.get("more_needed"))
    if verdict in seq.DECIDED:
        return f"**{verdict}**"
    if verdict == seq.UNINFORMATIVE:  # the reason is the note's first part (claims.uninformative)
        return f"{verdict} ({_text(row.get('note')).split('; ')[0] or 'no spread'})"
    if more is not None:
        needed = more_text(more, _text(row.get("more_unit")) or "sessions", " needed")
    elif "tied (more than half)" in _text(row.get("note")):  # claims.held_more: the rule, not the spread
        needed = "no number of sessions clears the early-decision rule at this tie share"
    else:
        needed = "sessions needed: unknown (no spread yet)"
    return f"{verdict} ({needed})" if verdict != seq.NO_DATA else f"{verdict} (no session in this evidence)"


# ---------------------------------------------------------------- the figure


def claims_figure(verdicts: Sequence[Verdict], sessions: pd.DataFrame, path: Path) -> Path:
    """One panel per claim with data: its sessions on the claim's scale (paired differences a - b, each session
    against the reference, or both arms side by side), the effect and its CI, the no-effect line and, for a "no
    difference" claim, its margin."""
    shown = [v for v in verdicts if v.effect is not None]
    rows = max(1, math.ceil(len(shown) / PANEL_COLUMNS))
    cols = min(PANEL_COLUMNS, max(1, len(shown)))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.axis("off")
    for ax, v in zip(axes.flat, shown, strict=False):
        _panel(ax, v, sessions)
    if not shown:
        axes[0][0].text(0.5, 0.5, "no claim has data", ha="center", va="center")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
    return path


def _panel(ax: plt.Axes, v: Verdict, sessions: pd.DataFrame) -> None:
    c = v.claim
    s = judged_sample(v, sessions)
    ratio = c.scale == "ratio"
    show = np.exp if ratio else (lambda x: x)
    rng = np.random.default_rng(0)  # the same jitter every time: the figure regenerates identically
    if s.diffs is not None:
        values = show(s.diffs)
        ax.scatter(rng.uniform(-0.15, 0.15, len(values)), values, s=14, alpha=0.7, color="tab:blue")
        pairs = "(a - b) at X - at Y" if c.versus else "pairs: a - b" if not ratio else "pairs: a / b"
        ax.set_xticks([0], ["a vs reference" if c.one_sample else pairs])
        x_effect = 0.45
    else:
        for x, values in ((0, s.a), (1, s.b)):
            ax.scatter(x + rng.uniform(-0.15, 0.15, len(values)), show(values), s=14, alpha=0.7)
        ax.set_xticks([0, 1], ["a", "b"])
        x_effect = 0.5
    assert v.effect is not None
    if v.ci is not None and all(math.isfinite(x) for x in v.ci):
        ax.errorbar([x_effect], [v.effect], yerr=[[max(0.0, v.effect - v.ci[0])], [max(0.0, v.ci[1] - v.effect)]], fmt="D",
                    color="black", capsize=4)
    else:
        ax.plot([x_effect], [v.effect], "D", color="black")
    if s.diffs is not None:
        ax.axhline(1.0 if ratio else 0.0, color="grey", lw=0.8, ls="--")
    if c.expect == seq.EQUIVALENT and c.margin is not None:
        low, high = _margin_band(c.margin, c.margin_relative, ratio, s.reference)
        ax.axhspan(low, high, color="tab:green", alpha=0.12)
    if ratio:
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(FormatStrFormatter("%.2g"))
    unit = "" if ratio else unit_of(c.metric)
    ax.set_ylabel(("ratio" if ratio else "difference" if s.diffs is not None else c.metric) +
                  (f" ({unit})" if unit else ""), fontsize=7)
    ax.set_title(f"{c.id} ({c.figure})\n{c.expect}: {v.verdict}", fontsize=8)
    ax.tick_params(labelsize=7)


def judged_sample(v: Verdict, sessions: pd.DataFrame) -> Sample:
    """The sessions ``v`` was judged on: a sequential run's claim keeps the decision of an earlier look, judged on
    the blocks up to it, the first prefix of blocks whose sample has the verdict's counts (counts only grow with
    the blocks, and blocks that add none to the claim leave its sample as it was)."""
    counts = (v.n_a, v.n_b, v.n_pairs)
    if v.look is not None and "block" in sessions.columns:
        for k in sorted(sessions["block"].dropna().unique()):
            s = sample(v.claim, sessions[sessions["block"] <= k])
            if (len(s.a), len(s.b), None if s.diffs is None else len(s.diffs)) == counts:
                return s
    return sample(v.claim, sessions)


def _margin_band(margin: float, relative: bool, ratio: bool, reference: float) -> tuple[float, float]:
    if ratio:
        return 1 / (1 + margin), 1 + margin
    m = margin * abs(reference) if relative else margin
    return -m, m


# ---------------------------------------------------------------- report.md


def render(folder: Path, manifest: Any, verdicts: Sequence[Verdict], sessions: pd.DataFrame,
           runs: Sequence[Mapping[str, Any]], figures: Sequence[Path]) -> str:
    """The evidence folder's ``report.md`` (deterministic: no paths outside the folder, no clock); its first line
    after the title says how many sessions were CPU-saturated and what that leaves the claims."""
    from nest_experiments.reports.report_md import saturation_paragraph, verdicts_section

    study = STUDIES[manifest.study]
    sequential = (folder / decisions.SEQUENTIAL_FILE).exists()
    saturation = decisions.saturation(sessions, claims=len(verdicts))
    parts = [f"# Evidence: {folder.name}", "", saturation_paragraph(saturation, where="CPU-saturated sessions"), "",
             f"The {study.paper or study.name} study (`{study.name}`), experiment `{manifest.experiment}`. "
             f"Rebuilt by `python -m nest_experiments plot evidence/{folder.name}` from the committed tables alone "
             f"(`sessions.csv`{', `sequential.json`' if sequential else ''}, `runs.json`, `evidence.json`); do not "
             "edit.", ""]
    if manifest.earlier:  # a sweep that went on from evidence (run --continue-from): each command, in order
        before = sum(int(e.get("runs") or 0) for e in manifest.earlier)
        parts += ["The runs were made by these commands, each going on from the sessions of those before it:", "",
                  *(f"    {e['command']}   # {e.get('runs', '?')} runs" for e in manifest.earlier),
                  f"    {manifest.command}   # {int(manifest.machine.get('runs') or 0) - before} runs", ""]
    else:
        parts += ["The runs were made by:", "", f"    {manifest.command}", ""]
    parts += design_table.section(design_table.read(folder))
    parts += _machine(manifest.machine) + _cells(sessions, manifest.cells) + _saturated(runs, sessions)
    parts += list(verdicts_section(verdicts, sequential=sequential, pending=decisions.in_progress(folder, sessions)))
    parts += _figures(folder, figures) + _files(folder, manifest)
    return "\n".join(parts).rstrip() + "\n"


def _machine(machine: Mapping[str, Any]) -> list[str]:
    if not machine:
        return []
    def counted(key: str) -> str:
        values = machine.get(key) or {}
        return ", ".join(f"{k} ({n})" for k, n in values.items()) if isinstance(values, Mapping) else str(values)

    lines = ["## Machine and runtime", "", "| | |", "|---|---|"]
    for key in ("runtime", "kernel", "clocksource", "accelerator"):
        if machine.get(key):
            lines.append(f"| {key} (runs) | {counted(key)} |")
    for key in ("runs", "completed", "saturated_runs", "first_start", "last_end", "cpus", "note"):
        if machine.get(key) is not None:
            lines.append(f"| {key.replace('_', ' ')} | {machine[key]} |")
    versions = machine.get("versions") or {}
    if versions:
        lines.append("| versions | " + "; ".join(f"{k}: {v}" for k, v in versions.items()).replace("|", "/") + " |")
    return [*lines, ""]


def _cells(sessions: pd.DataFrame, cells: Sequence[str]) -> list[str]:
    keys = [c for c in ("runtime", *cells) if c in sessions.columns and sessions[c].notna().any()]
    lines = ["## Sessions per cell", "", f"{len(sessions)} completed sessions in {sessions['block'].nunique()} "
             "block(s); a saturated session (a CPU-saturated 1 s window, any rule) is left out of the claims.", ""]
    if not keys:
        return lines
    grouped = sessions.assign(saturated=sessions["saturated"].eq(True)).groupby(keys, dropna=False)
    lines += ["| " + " | ".join(keys) + " | sessions | saturated |", "|" + "---|" * (len(keys) + 2)]
    for key, g in grouped:
        values = key if isinstance(key, tuple) else (key,)
        lines.append("| " + " | ".join(map(str, values)) + f" | {len(g)} | {int(g['saturated'].sum())} |")
    return [*lines, ""]


def _saturated(runs: Sequence[Mapping[str, Any]], sessions: pd.DataFrame) -> list[str]:
    lines = ["## CPU-saturated sessions", ""]
    if not runs:
        n = int(sessions["saturated"].eq(True).sum())
        return [*lines, f"{n} of {len(sessions)} sessions saturated (`sessions.csv`; no `runs.json` to say by which "
                        "rule).", ""]
    hit = [r for r in runs if int(r.get("saturated_windows") or 0) > 0]
    lines.append(f"{len(hit)} of {len(runs)} runs had a CPU-saturated 1 s window (`runs.json`; the rules: the "
                 "machine's, >= 95 % of all CPUs; one process of the run, >= 95 % of one CPU; in the VM runtime "
                 "one qemu thread on the host)." + ("" if hit else " Target: 0."))
    if hit:
        lines += ["", "| run | status | saturated windows | by rule | busiest process |", "|---|---|---|---|---|"]
        for r in hit:
            by = r.get("saturated_by") or {}
            rules = ", ".join(f"{k} {n}" for k, n in by.items() if n) if isinstance(by, Mapping) else str(by)
            top = r.get("process_max") or {}
            busiest = (f"{top.get('app', '?')}/{top.get('comm', '?')} {top.get('share', 0):.0%} of a CPU"
                       if isinstance(top, Mapping) and top else "—")
            lines.append(f"| {r.get('run')} | {r.get('status')} | {r.get('saturated_windows')} | {rules or '—'} | "
                         f"{busiest} |")
    return [*lines, ""]


def _figures(folder: Path, figures: Sequence[Path]) -> list[str]:
    if not figures:
        return []
    lines = ["## Figures", "", "Per claim, its sessions on the claim's scale (paired differences, or each session "
             "against the reference, or the two arms), the effect (Hodges-Lehmann) with the CI of the look that "
             "judged it, the no-effect line (dashed) and a \"no difference\" claim's margin (green).", ""]
    lines += [f"![{f.stem}]({f.relative_to(folder).as_posix()})" for f in figures]
    return [*lines, ""]


def _files(folder: Path, manifest: Any) -> list[str]:
    lines = ["## Files", "",
             "- `evidence.json`: the study, experiment, command, cell columns, machine summary, tables;",
             "- `sessions.csv`: one row per session, the table the claims are judged on; `claims.csv`: the verdicts;",
             "- `runs.json`: per run its runtime, kernel, clocksource, CPU saturation by rule, versions;"]
    if (folder / decisions.SEQUENTIAL_FILE).exists():
        lines.append("- `sequential.json`: the looks of `run --until-decided`;")
    if (folder / "preregistration.json").exists():
        lines.append("- `preregistration.json`: the claims as `claims freeze` recorded them (each declaration and "
                     "its hash, margin and its source, the claim file's hash); a claim changed since is marked post "
                     "hoc;")
    for name, info in (manifest.tables or {}).items():
        if isinstance(info, Mapping):
            lines.append(f"- `{info.get('file')}`: the `{name}` frame of `results.load` ({info.get('rows')} rows);")
        else:
            lines.append(f"- `{name}`: {info};")
    if (folder / "sweep_report").is_dir():
        lines.append("- `sweep_report/`: the report `plot` wrote from the run folders (not regenerated here);")
    for name, why in (manifest.sweep_report or {}).items():
        lines.append(f"- `sweep_report/{name}`: {why};")
    if (folder / "sweep_report" / "earlier").is_dir():
        lines.append("- `sweep_report/earlier/`: the sweep report of the runs this sweep went on from (no HTML);")
    if (folder / SWEEP_LOG).is_file():
        lines.append(f"- `{SWEEP_LOG}`: the wall time of each block of the sweep, one line per side (the runner; "
                     "in the VM runtime also the host);")
    lines[-1] = lines[-1].rstrip(";") + "."
    return [*lines, ""]
