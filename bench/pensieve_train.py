"""Train the learned ABR (``pensieve``) in the simulator, draw its learning curve, compare it on held-out traces.

    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/pensieve_train.py \\
        [--iterations 15000] [--batch 64] [--seed 1] [--out FILE.npz] [--curve FILE.png]
    .venv/bin/python bench/pensieve_train.py --compare-only [--weights FILE.npz]

Training (``nest_experiments/training/train.py``, numpy only) plays
``--batch`` simulated sessions per iteration on the built-in trace families
(fcc and hsdpa seeds 1000-1399, the fixed patterns dh, dl, dvl, h2eval from
random starts), the ``abr_quic_tcp`` ladder, the study's player (max
buffer 12 s, threshold 1 s) and link model (80 ms RTT, 0.95 payload,
128 kbit/s audio: ``nest_experiments/training/sim.py``). It writes the
weights (``--out``; the shipped policy is
``nest_experiments/dash/core/abr/pensieve.npz``) and the learning curve
(``--curve``: the training batches' mean QoE and the greedy policy's mean
QoE on 40 validation sessions (fcc and hsdpa seeds 3000-3015, each pattern
from 2 starts) every ``--eval-every`` iterations, with the rule-based ABRs'
on the same sessions as lines; the best evaluation's weights are kept).

Then it prints, per trace family, the mean QoE (eq. 1), average bitrate and
rebuffer time (and the median start-up delay over all sessions, which eq. 1
does not count) of ``pensieve`` and the registry's ABRs (and a random policy)
on held-out sessions (fcc and hsdpa seeds 2000-2039, each pattern from 8
starts), and on the study's own traces (fcc and hsdpa seeds 1-25, the whole
192 s video: what ``run --paper`` plays).

One BLAS thread (set here before numpy loads): the matrices are small and
OpenBLAS's threads, spinning beside other work on two cores, made a
training step ~40x slower.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.dash.core.abr import pensieve_policy as learned  # noqa: E402
from nest_experiments.training import sim, train  # noqa: E402

BASELINES = ("bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic")
CURVE_BASELINES = ("bba", "bola", "mpc_fast")


def plot_curve(curve: train.Curve, baselines: dict[str, float], path: Path, title: str, kept: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    window = max(1, len(curve.train_qoe) // 100)
    smooth = np.convolve(curve.train_qoe, np.ones(window) / window, mode="valid")
    ax.plot(curve.iteration[window - 1 :], smooth, color="0.6", lw=1, label=f"training batches (mean of {window})")
    ax.plot(curve.eval_iteration, curve.eval_qoe, color="C3", lw=2, label="pensieve, greedy, validation sessions")
    ax.axvline(kept, color="C3", ls=":", lw=1, label=f"kept: iteration {kept}")
    for i, (name, value) in enumerate(baselines.items()):
        ax.axhline(value, color=f"C{i}", ls="--", lw=1, label=f"{name} (validation)")
    low = min(min(curve.eval_qoe), *baselines.values())
    ax.set_ylim(low - 0.5 * abs(low) - 10, max(max(curve.eval_qoe), *baselines.values()) + 10)
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean QoE per session (eq. 1)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def contenders(weights: learned.Policy, max_buffer_s: float) -> dict[str, learned.Policy | sim.SimPolicy]:
    out: dict[str, learned.Policy | sim.SimPolicy] = {"pensieve": weights}
    out.update({name: sim.RegistryPolicy(name=name, max_buffer_s=max_buffer_s) for name in BASELINES})
    out["random"] = sim.RandomPolicy(levels=len(weights.bitrates_bps), rng=np.random.default_rng(0))
    return out


def compare(weights: learned.Policy, sessions: train.Sessions, config: sim.SimConfig, heading: str) -> None:
    families = sorted(set(sessions.family), key=lambda f: ("fcc", "hsdpa", *train.PATTERNS).index(f))
    print(f"\n{heading}: mean QoE (eq. 1) per session [avg bitrate kbit/s, rebuffer s]; n = sessions")
    print(f"{'abr':<11} {'startup s':>9} {'all':>22}"
          + "".join(f" {f + ' n=' + str(sessions.family.count(f)):>22}" for f in families))
    for name, chooser in contenders(weights, config.max_buffer_s).items():
        rec = train.play(chooser, sessions, config)
        cells = [_cell(rec, np.ones(len(sessions.family), bool))]
        cells += [_cell(rec, np.array([f == fam for f in sessions.family])) for fam in families]
        print(f"{name:<11} {np.median(rec.startup_delay_s):9.2f}" + "".join(f" {c:>22}" for c in cells))


def _cell(rec: sim.Record, mask: np.ndarray) -> str:
    return f"{rec.qoe[mask].mean():7.1f} [{rec.avg_bitrate_bps[mask].mean() / 1e3:4.0f}, {rec.rebuffer_s[mask].mean():5.1f}]"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=15000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--out", type=Path, default=Path("pensieve.npz"))
    p.add_argument("--curve", type=Path, default=Path("pensieve_learning_curve.png"))
    p.add_argument("--compare-only", action="store_true", help="no training: compare --weights")
    p.add_argument("--weights", type=Path, default=learned.DEFAULT_WEIGHTS)
    args = p.parse_args()
    config = sim.SimConfig()
    if args.compare_only:
        weights = learned.read_policy(args.weights)
        print(f"{args.weights}: {weights.meta}")
    else:
        weights = _train(args, config)
    compare(weights, train.held_out_sessions(config), config, "held-out sessions (simulator)")
    compare(weights, train.held_out_sessions(config, seeds=range(1, 26), offsets=1), config,
            "the study's traces, fcc and hsdpa seeds 1-25 (simulator)")
    return 0


def _train(args: argparse.Namespace, config: sim.SimConfig) -> learned.Policy:
    validation = train.held_out_sessions(config, seeds=range(3000, 3016), offsets=2)
    baselines = {n: float(train.mean_qoe(sim.RegistryPolicy(name=n, max_buffer_s=config.max_buffer_s), validation,
                                         config).mean()) for n in CURVE_BASELINES}
    tc = train.TrainConfig(seed=args.seed, iterations=args.iterations, batch=args.batch, eval_every=args.eval_every)

    def progress(it: int, batch_qoe: float, evaluated: float | None) -> None:
        if evaluated is not None:
            print(f"iteration {it:6d}: batch QoE {batch_qoe:8.1f}, validation QoE {evaluated:8.1f}", flush=True)

    weights, curve = train.train(tc, config, validation=validation, progress=progress)
    weights.save(args.out)
    title = (f"pensieve: {tc.iterations} iterations x {tc.batch} sessions, seed {tc.seed}, "
             f"{curve.seconds / 60:.1f} CPU min; validation: {len(validation.index)} sessions")
    plot_curve(curve, baselines, args.curve, title, int(weights.meta["kept_iteration"]))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) and {args.curve}; training {curve.seconds:.0f} CPU s")
    print("validation baselines: " + ", ".join(f"{n} {v:.1f}" for n, v in baselines.items()))
    return weights


if __name__ == "__main__":
    raise SystemExit(main())
