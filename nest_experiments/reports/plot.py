"""PNG plots from run folders: qdisc backlog, drops, delay; throughput per flow; a DASH run's timeline (the
player, the transport and the queues on one clock) with a line per stall (:mod:`nest_experiments.reports.timeline`).

On an evidence folder (``evidence.json``, :mod:`nest_experiments.reports.evidence`), :func:`plot_folder` rebuilds
its claim table, report and figures from the committed tables alone.

On an experiment (sweep) folder, :func:`plot_folder` also writes the sweep
report (``report/report.md``, see :mod:`nest_experiments.reports.report_md`), the files
its study adds beside it (:attr:`nest_experiments.studies.Study.outputs`) and, from all of them and the
per-run PNGs, one self-contained ``report/report.html`` (:mod:`nest_experiments.reports.report_html`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from nest_experiments.errors import NestExpError  # noqa: E402
from nest_experiments.reports.timeline import timeline_files  # noqa: E402
from nest_experiments.rundir import (  # noqa: E402
    IPERF3,
    MANIFEST,
    QDISC_PLOT,
    THROUGHPUT_PLOT,
    RunFolder,
    read_manifest,
    run_dirs,
)


def plot_folder(folder: Path, *, report: bool = True, run_plots: bool = True) -> list[Path]:
    """Per-run plots of every completed run, and the sweep report when ``folder`` holds runs.

    A sweep folder whose runs all failed still gets its report (which lists
    them); a single run folder that did not complete is an error.
    """
    from nest_experiments.reports import evidence

    if evidence.is_evidence(folder):  # committed evidence: the claim table and report from its tables alone
        return evidence.rebuild(folder)
    dirs = run_dirs(folder)
    runs = [d for d in dirs if (read_manifest(d) or {}).get("status") == "completed"]
    sweep = bool(dirs) and not (folder / MANIFEST).exists()
    if not runs and not (sweep and report):
        raise NestExpError(f"{folder}: no completed run folder (one with manifest.json status 'completed') here, "
                           f"and no {evidence.MANIFEST} (an evidence folder)")
    out: list[Path] = []
    if run_plots:
        for run_dir in runs:
            out += plot_run(run_dir)
    if sweep and report:
        from nest_experiments.reports.report_html import write_report_html
        from nest_experiments.reports.report_md import REPORT_DIR, write_sweep_report
        from nest_experiments.studies import study_for

        out += write_sweep_report(folder)
        study = study_for(folder)
        own = study.outputs(folder, folder / REPORT_DIR) if study.outputs is not None else []
        out += own
        out.append(write_report_html(folder, folder / REPORT_DIR, study_files=own))
    return out


def plot_run(run_dir: Path) -> list[Path]:
    out = []
    q = RunFolder(run_dir).qdisc()
    if not q.empty:
        out.append(_qdisc_plot(run_dir, q))
    flows = RunFolder(run_dir).frame(IPERF3)
    if flows is not None:
        out.append(_throughput_plot(run_dir, flows))
    out += timeline_files(run_dir, _save)
    return out


def _leaves(q: pd.DataFrame) -> pd.DataFrame:
    """The queues that matter: every qdisc except HTB shapers and netem delay lines."""
    leaves = q[~q.kind.isin(["htb", "netem"])]
    return leaves if len(leaves) else q


def _qdisc_plot(run_dir: Path, q: pd.DataFrame) -> Path:
    leaves = _leaves(q)
    has_delay = leaves.delay_ms.notna().any() if "delay_ms" in leaves else False
    fig, axes = plt.subplots(3 if has_delay else 2, 1, figsize=(8, 7 if has_delay else 5), sharex=True)
    for (node, dev, kind), rows in leaves.groupby(["node", "dev", "kind"]):
        label = f"{node}->{dev} {kind}"
        axes[0].plot(rows.t, rows.backlog_pkts, label=label, lw=0.8)
        axes[1].plot(rows.t, rows.drops - rows.drops.iloc[0], label=label, lw=0.8)
        if has_delay and rows.delay_ms.notna().any():
            axes[2].plot(rows.t, rows.delay_ms, label=label, lw=0.8)
    axes[0].set_ylabel("backlog (packets)")
    axes[1].set_ylabel("drops (cumulative)")
    if has_delay:
        axes[2].set_ylabel("queue delay (ms, kernel)")
    axes[-1].set_xlabel("time since run start (s)")
    axes[0].legend(fontsize=7, loc="upper right")
    axes[0].set_title(f"{run_dir.parent.name} / {run_dir.name}: qdiscs")
    return _save(fig, run_dir / QDISC_PLOT)


def _throughput_plot(run_dir: Path, df: pd.DataFrame) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    for flow, rows in df.groupby("flow"):
        ax.plot(rows.t, rows.bits_per_second / 1e6, label=str(flow), lw=0.8)
    total = df.groupby(df.t.round(0)).bits_per_second.sum() / 1e6
    ax.plot(total.index, total.values, "k--", lw=1, label="sum")
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_title(f"{run_dir.parent.name} / {run_dir.name}: iperf3 flows")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    return _save(fig, run_dir / THROUGHPUT_PLOT)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path
