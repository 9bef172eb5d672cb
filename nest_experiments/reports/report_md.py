"""The sweep report: ``<sweep>/report/report.md`` with its PNGs and ``summary.csv``.

:func:`write_sweep_report` picks the sweep's study (:func:`nest_experiments.studies.study_for`),
loads the sweep with the study's metrics and checks (:mod:`nest_experiments.analysis.report`),
draws the figures (:mod:`nest_experiments.analysis.report_figures`) and writes the
Markdown: runs per cell, the table (mean, 95% CI, Mann-Whitney U p), the
study's claims, the figures, sanity checks per cell and per run, excluded
runs, CPU and other warnings, and the data each run lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nest_experiments.analysis import decisions, design_table
from nest_experiments.analysis import markdown as md
from nest_experiments.analysis.claims import PAPER, Verdict, verdict_table
from nest_experiments.analysis.report import CellCheck, Row, Sweep, profiles, table
from nest_experiments.analysis.report_figures import context_text, metric_file, sweep_figures
from nest_experiments.analysis.stats import MIN_REPS, TOO_FEW, Estimate, fmt_p
from nest_experiments.rundir import write_atomic, write_csv
from nest_experiments.studies import Study, study_for

REPORT_DIR = "report"
REPORT_MD = "report.md"
SUMMARY_CSV = "summary.csv"
CLAIMS_CSV = "claims.csv"
WARNINGS_HEADING = "CPU saturation and other warnings"  # the section that lists the CPU-saturated runs


def write_sweep_report(folder: Path, out_dir: Path | None = None, *, figures: bool = True,
                       study: Study | None = None) -> list[Path]:
    """Write the report of the sweep in ``folder`` (its study's unless one is given); returns report.md,
    summary.csv and the PNGs."""
    study = study or study_for(folder)
    sweep = study.load_sweep(folder)
    out = out_dir or folder / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    rows = table(sweep)
    pngs = (sweep_figures(sweep, rows, profiles(sweep), out, delay_reference=study.delay_reference)
            if figures else {})
    write_summary_csv(out / SUMMARY_CSV, sweep, rows)
    verdicts = study.verdicts(folder) if study.paper_claims else []
    written = [out / REPORT_MD, out / SUMMARY_CSV]
    if verdicts:
        rows_out = decisions.verdict_rows(verdicts)
        write_csv(out / CLAIMS_CSV, list(rows_out[0]), rows_out)
        written.append(out / CLAIMS_CSV)
    text = render(sweep, rows, study.sweep_cell_checks(sweep), pngs, study, saturation=study.saturation(folder),
                  verdicts_md=verdicts_section(verdicts, sequential=decisions.is_sequential(folder),
                                               pending=decisions.in_progress(folder, study.sessions(folder))
                                               if verdicts else None))
    write_atomic(out / REPORT_MD, text)
    return [*written, *pngs.values()]


def verdicts_section(verdicts: Sequence[Verdict], *, sequential: bool,
                     pending: tuple[int, int] | None = None) -> list[str]:
    """The paper's claims as data, judged (``claims.csv`` holds the same, tidy). ``pending``: a block the budget
    cut short (block, its sessions so far: :func:`nest_experiments.analysis.decisions.in_progress`)."""
    if not verdicts:
        return []
    waiting = (f" Block {pending[0]} is not complete (its budget ended part-way; {pending[1]} session(s) of it so "
               "far): its sessions are not judged until the block is complete, as a look follows a whole block; "
               "the command that made the folder, run again, completes it." if pending else "")
    rule = ("The sweep ran until decided (`run --until-decided`): a look after each block, alpha spent over each "
            "claim's looks as alpha_k = 0.05 x 6 / (pi^2 k^2) (their sum is 0.05 over any number of looks, so the "
            "chance of any false decision stays <= 0.05 by the union bound; a look at which a claim could not be "
            "decided spends none of its alpha); a claim keeps its first decision. The paper's claims are one "
            "family (its fidelity checks another): its alpha is split over the paper's experiments by their claims, "
            "and within them Holm's step-down judges each open claim at its share / the family's claims still "
            "open, spent over its own looks (bench/family_error.py: 15 claims with no effect, 1000 sequential "
            "experiments, family-wise error 0.021); the level column says which. A decision counts only when at "
            "most half its pairs are tied and its untied pairs alone could reject at the look's level (an "
            "equivalence claim: its pairs); held back, the claim stays open; a claim decided at an earlier look "
            "shows its CI on all the sessions beside it. A claim whose metric has no spread (one value in every "
            "session, at its cap, every pair tied) is uninformative."
            if sequential else
            "One fixed-size analysis at alpha = 0.05 (the number of sessions was set before they were judged), the "
            "paper's claims one family (Holm's step-down: each open claim at the family's share / its claims "
            "still open).")
    paper = [v for v in verdicts if v.claim.kind == PAPER]
    fidelity = [v for v in verdicts if v.claim.kind != PAPER]

    def counted(vs: Sequence[Verdict]) -> str:
        counts = {k: sum(v.verdict == k for v in vs) for k in dict.fromkeys(v.verdict for v in vs)}
        return ", ".join(f"{n} {k}" for k, n in counts.items()) or "none"

    apart = ["### Fidelity checks (ours, not the paper's)", "",
             "Our models against a reference (a real browser): a family of their own, never counted among the "
             f"paper's verdicts. Verdicts: {counted(fidelity)}.", "", verdict_table(fidelity)] if fidelity else []
    return ["## The paper's claims, judged", "",
            "Each claim is a metric per session (the unit of replication), two arms, its conditions and, where the "
            "design pairs sessions, its pairing key; CPU-saturated sessions (machine or per-process rule) are "
            "left out and counted. Paired claims: Wilcoxon signed-rank test and the Hodges-Lehmann estimate with "
            "the CI that inverts it; unpaired: Mann-Whitney U and the Hodges-Lehmann shift; \"no difference\": "
            "TOST, agreeing only when the CI lies inside the stated margin; a directional claim with a margin (the "
            "smallest difference it means) also contradicts when its CI lies below that margin. " + rule, "",
            "Verdicts of the paper's claims: " + counted(paper) + "." + waiting, "",
            *([verdict_table(paper)] if paper else []), *([""] if paper and apart else []), *apart]


# ---------------------------------------------------------------- formatting


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1e-9:
        value = 0.0  # floating-point noise (e.g. a jitter of equal RTTs)
    if value == 0 or 0.01 <= abs(value) < 1e5:
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return f"{value:.3g}"


def fmt_estimate(est: Estimate | None) -> str:
    if est is None or est.mean is None:
        return "- (n=0)"
    if not est.enough:
        return f"{fmt(est.mean)} (n={est.n}; {TOO_FEW}: no CI)"
    return f"{fmt(est.mean)} [{fmt(est.low)}, {fmt(est.high)}] (n={est.n})"


def _p_cell(row: Row, pair: tuple[str, str]) -> str:
    if any(row.estimates[a].n == 0 for a in pair):
        return "- (no data)"
    return fmt_p(row.p_values.get(pair), TOO_FEW)


# ---------------------------------------------------------------- sections


def render(sweep: Sweep, rows: Sequence[Row], checks: Sequence[CellCheck], figures: dict[str, Path],
           study: Study, *, saturation: decisions.Saturation | None = None, verdicts_md: Sequence[str] = ()) -> str:
    """report.md; its first line after the title says how many sessions were CPU-saturated and what that leaves the
    claims (``saturation``, the study's :meth:`~nest_experiments.studies.Study.saturation`; computed when None)."""
    if saturation is None:
        saturation = study.saturation(sweep.folder)
    parts = [f"# Sweep report: {sweep.folder.name}", "", saturation_paragraph(saturation), ""]
    parts += _head(sweep, study) + design_table.section(design_table.of_folder([r.path for r in sweep.completed]))
    parts += _cells(sweep) + _metrics(sweep, rows) + list(verdicts_md)
    parts += _figures(sweep, figures, study) + _sanity(sweep, checks, study) + _excluded(sweep) + _warnings(sweep)
    parts += _gaps(sweep)
    return "\n".join(parts).rstrip() + "\n"


def _head(sweep: Sweep, study: Study) -> list[str]:
    keys = sorted({k for r in sweep.runs for k in r.point})
    c, a = sweep.axes.compared, sweep.axes.at
    c_keys, a_keys = c.keys(keys), a.keys(keys)
    lines = [f"Made by `python -m nest_experiments plot {sweep.folder}` from {len(sweep.runs)} run folder(s): "
             f"{len(sweep.completed)} completed, {len(sweep.excluded)} excluded (not completed; listed below).", "",
             f"- Study: {study.title} (`nest_experiments.studies.{study.name}`).",
             f"- Swept keys: {', '.join(f'`{k}`' for k in keys) or 'none'}.",
             f"- Compared: the {c.name} ({', '.join(f'`{k}`' for k in c_keys) or c.unswept}: "
             f"{', '.join(c.label(v) for v in sweep.compared) or '-'}) at each {a.name} "
             f"({', '.join(f'`{k}`' for k in a_keys) or a.unswept}: {', '.join(sweep.ats) or '-'}).",
             f"- Runs are grouped by their point without the repetition; a cell is (other swept keys, {a.name}, "
             f"{c.name}).",
             f"- Statistics: mean and 95% confidence interval (Student's t) over repetitions; two-sided "
             f"Mann-Whitney U between {c.plural} at each {a.name}. Where a group has fewer than {MIN_REPS} values the "
             f"report says \"{TOO_FEW}\" instead of a CI or a p-value.",
             "- DASH metrics per stream from `segments.csv` (nest_experiments.dash.core.qoe; DESIGN.md §4 definitions; "
             "response latency = TTFB = t_first_byte - t_request; QoE = ABR paper eq. (1): sum of bitrates in Mbit/s "
             "- 4.3 x stall s - sum of |bitrate changes| in Mbit/s, per stream with its own stalls); "
             "queue delays are means over each run's steady window (from traffic start + 2 s to traffic end - 1 s).",
             ""]
    return lines


def saturation_paragraph(saturation: decisions.Saturation, *, where: str = WARNINGS_HEADING) -> str:
    """A report's first paragraph: :meth:`nest_experiments.analysis.decisions.Saturation.headline` in bold (the line that ends ``run``) and,
    when some session was saturated, the section (``where``) that lists the saturated runs and by which rule."""
    listed = f" The saturated runs, and by which rule: \"{where}\" below." if saturation.saturated else ""
    return f"**{saturation.headline()}.**{listed}"


def _cells(sweep: Sweep) -> list[str]:
    label = sweep.axes.compared.label
    header = ["other swept keys", sweep.axes.at.name, *[label(v) for v in sweep.compared]]
    lines = [[context_text(c) or "-", at, *[str(len(sweep.cell(c, at, v))) for v in sweep.compared]]
             for c in sweep.contexts for at in sweep.ats]
    return ["## Completed repetitions per cell", "", *md.table(header, lines)]


def _metrics(sweep: Sweep, rows: Sequence[Row]) -> list[str]:
    pairs, label = sweep.pairs(), sweep.axes.compared.label
    out = [f"## Metrics: mean [95% CI] per {sweep.axes.compared.name} and {sweep.axes.at.name}, Mann-Whitney U p", ""]
    if not rows:
        return out + ["No metric could be computed (no completed run with data).", ""]
    for context in sweep.contexts:
        if context:
            out += [f"### {context_text(context)}", ""]
        header = ["metric", "unit", sweep.axes.at.name, *[label(v) for v in sweep.compared],
                  *[f"p ({label(a)} vs {label(b)})" for a, b in pairs]]
        lines = [[r.metric.label, r.metric.unit, r.at, *[fmt_estimate(r.estimates.get(v)) for v in sweep.compared],
                  *[_p_cell(r, pair) for pair in pairs]] for r in rows if r.context == context]
        out += md.table(header, lines)
    missing = [m.label for m in sweep.dash_metrics if not any(r.metric.key == m.key for r in rows)]
    if missing:
        out += [f"No run had data for: {', '.join(missing)}.", ""]
    return out



def _figures(sweep: Sweep, figures: dict[str, Path], study: Study) -> list[str]:
    out = ["## Figures", ""]
    for title, stream in study.figure_sections:
        names = [(m, c, metric_file(m, c)) for m in sweep.metrics if m.plot and m.key.startswith(f"{stream}.")
                 for c in sweep.contexts]
        present = [(m, c, n) for m, c, n in names if n in figures]
        if present:
            out += [f"### {title}", ""]
            out += [f"![{m.label}{' — ' + context_text(c) if c else ''}]({n})\n" for m, c, n in present]
    out += [f"### Queue delay over time{study.delay_reference}", ""]
    qd = sorted(n for n in figures if n.startswith("qdelay_"))
    if not qd:
        out += ["No queue-delay series: no run had `qdisc.csv` delay_ms or `qdelay.csv` rows on an AQM egress.", ""]
    out += [f"![queue delay: {n[len('qdelay_'):-len('.png')]}]({n})\n" for n in qd]
    return out


def _sanity(sweep: Sweep, checks: Sequence[CellCheck], study: Study) -> list[str]:
    out = ["## Sanity checks", "", study.sanity_rules, ""]
    failed = [c for c in checks if c.status != "pass"]
    out += [f"**{len(checks) - len(failed)} of {len(checks)} cell checks pass.**", ""]
    out += ["### Per cell", ""]
    axes = sweep.axes
    header = ["other swept keys", axes.at.name, axes.compared.name, "check", "checks passing", "result",
              "range over runs; detail"]
    out += md.table(header, [[context_text(c.context) or "-", c.at, axes.compared.label(c.compared), c.name,
                              f"{c.passed}/{c.total}", c.status.upper(), c.detail] for c in checks])
    out += ["### Per run", ""]
    lines = [[r.name, c.name, c.subject, c.status.upper(), c.detail] for r in sweep.completed for c in r.checks]
    return out + (md.table(["run", "check", "subject", "result", "detail"], lines) if lines else ["No checks ran.", ""])


def _excluded(sweep: Sweep) -> list[str]:
    out = ["## Excluded runs (failed or interrupted)", ""]
    if not sweep.excluded:
        return out + ["None.", ""]
    return out + md.table(["run", "status", "reason"], [[r.name, r.status, r.reason or "-"] for r in sweep.excluded])


def _warnings(sweep: Sweep) -> list[str]:
    out = [f"## {WARNINGS_HEADING}", ""]
    hot = [r for r in sweep.runs if r.saturated_windows > 0]
    if hot:
        out += [f"{len(hot)} run(s) had CPU-saturated windows: the emulation, not the network, may have shaped "
                "their results.", ""]
        out += md.table(["run", "CPU mean", "CPU max", "saturated 1 s windows", "host steal (VM runtime)"],
                      [[r.name, fmt(r.cpu.get("cpu_mean")), fmt(r.cpu.get("cpu_max")),
                        str(r.saturated_windows), fmt(r.cpu.get("host_steal"))] for r in hot])
    else:
        out += ["No run had a CPU-saturated window.", ""]
    lines = [[r.name, w] for r in sweep.runs for w in r.warnings]
    return out + (md.table(["run", "warning (manifest)"], lines) if lines else ["No other manifest warnings.", ""])


def _gaps(sweep: Sweep) -> list[str]:
    lines = [[r.name, n] for r in sweep.completed for n in r.notes]
    out = ["## Missing data", ""]
    return out + (md.table(["run", "note"], lines) if lines else ["Every completed run had every file the report reads.",
                                                                  ""])


# ---------------------------------------------------------------- summary.csv


def write_summary_csv(path: Path, sweep: Sweep, rows: Sequence[Row]) -> None:
    at = sweep.axes.at.name
    value_fields = [f"{f}_{v}" for v in sweep.compared for f in ("n", "mean", "ci_low", "ci_high")]
    p_fields = [f"p_{a}_vs_{b}" for a, b in sweep.pairs()]
    fields = ["metric", "label", "unit", "context", at, *value_fields, *p_fields]
    out = []
    for r in rows:
        line: dict[str, object] = {"metric": r.metric.key, "label": r.metric.label, "unit": r.metric.unit,
                                   "context": context_text(r.context), at: r.at}
        for a, est in r.estimates.items():
            line.update({f"n_{a}": est.n, f"mean_{a}": est.mean, f"ci_low_{a}": est.low, f"ci_high_{a}": est.high})
        line.update({f"p_{a}_vs_{b}": p for (a, b), p in r.p_values.items()})
        out.append(line)
    write_csv(path, fields, out)
