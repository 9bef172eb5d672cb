"""The NeST paper's Fig. 12 from ``results.load`` alone: queue delay over time on r1 -> r3, PIE vs FQ-PIE, one
panel per target (measured from captures, ``qdelay.csv``; mean per 1 s over the repetitions).

    .venv/bin/python examples/queue_delay_per_target.py results/nest_paper fig12.png [--node r1]

Prints the mean delay per AQM and target (ms) and writes the PNG.
"""

from __future__ import annotations

import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nest_experiments import results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("png")
    ap.add_argument("--node", default="r1", help="the router whose egress carries the AQM (default r1: r1 -> r3)")
    args = ap.parse_args(argv)
    r = results.load(args.sweep)
    kind = next((k for k in r.swept if k.endswith("qdisc.kind")), None)  # the first bottleneck's AQM and target
    target = next((k for k in r.swept if k.endswith("qdisc.target")), None)
    if kind is None or target is None:
        print(f"{args.sweep}: the sweep must sweep a qdisc kind and target (swept: {', '.join(r.swept)})",
              file=sys.stderr)
        return 1
    d = r.qdelay[r.qdelay.node == args.node].dropna(subset=["delay_ms"])
    if d.empty:
        print(f"{args.sweep}: no qdelay.csv rows on {args.node}", file=sys.stderr)
        return 1
    d = d.assign(second=d.t.floordiv(1.0) + 0.5)
    per_run = d.groupby([target, kind, "run", "second"]).delay_ms.mean().reset_index()
    curves = per_run.groupby([target, kind, "second"]).delay_ms.mean().reset_index()
    targets = sorted(curves[target].unique(), key=lambda v: float(str(v).rstrip("ms")))
    colours = {aqm: f"C{i}" for i, aqm in enumerate(sorted(curves[kind].unique()))}  # one colour per AQM
    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 3.5), sharey=True, squeeze=False)
    for ax, tgt in zip(axes[0], targets, strict=True):
        for aqm, rows in curves[curves[target] == tgt].groupby(kind):
            ax.plot(rows.second, rows.delay_ms, label=str(aqm), color=colours[aqm])
            print(f"{aqm} {tgt}: mean {d[(d[target] == tgt) & (d[kind] == aqm)].delay_ms.mean():.3f} ms")
        ax.axhline(float(str(tgt).rstrip("ms")), color="grey", ls=":", lw=1)
        ax.set_title(f"target {tgt}")
        ax.set_xlabel("time since run start (s)")
    axes[0][0].set_ylabel(f"queue delay on {args.node} (ms, measured)")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
