"""The learned ABR's simulator against the real player: the same ABR on the same trace, emulated and simulated.

    sudo flock /tmp/nest-dev.lock .venv/bin/python bench/pensieve_sim_check.py \\
        [--abrs bba,bola,mpc_fast,pensieve] [--traces fcc-1,hsdpa-1] [--clip 40s] [--duration 60s] [--runtime host]

Emulation: the dumbbell, the media from h1 (Caddy, HTTP/1.1 over TCP) to
the player on s1 through the bottleneck r1 -> r2 following the trace (HTB,
a 60-packet pfifo leaf, as ``experiments/abr_quic_tcp.toml``), CUBIC, the
``abr_quic_tcp`` ladder cut to ``--clip``, max buffer 12 s, threshold 1 s.
The host has no netem: no added delay (the study's 80 ms RTT needs the VM;
``--runtime vm`` with ``--rtt 0.08`` and a ``delay`` in the file would test
that).

Simulation (``nest_experiments/training/sim.py``) of what the emulation
has: the same trace from the time the player's first video request went out
(the trace starts at the run's t = 0), a 0.1 s grid, an RTT of ``--rtt``
(default 2 ms: veth and HTB without netem), payload 1448/1514 of the HTB
rate (a full TCP segment with timestamps in an Ethernet frame), the audio's
share at the mean bitrate the emulated player chose for audio.

Compared over the video segments the emulated player downloaded: average
video bitrate (ratio simulated / emulated, tolerance 0.85-1.15), rebuffer
time (both streams in the emulation; tolerance max(1 s, 25% of the
emulated)), and QoE of eq. (1) (printed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.config import traces  # noqa: E402
from nest_experiments.dash.core import qoe  # noqa: E402
from nest_experiments.dash.core.records import SegmentRow  # noqa: E402
from nest_experiments.rundir import MANIFEST, RunFolder, run_dirs  # noqa: E402
from nest_experiments.training import sim  # noqa: E402
from nest_experiments.units import parse_time  # noqa: E402

BITRATE_TOLERANCE = (0.85, 1.15)
REBUFFER_TOLERANCE_S, REBUFFER_TOLERANCE_FRAC = 1.0, 0.25
PAYLOAD_FRACTION = 1448 / 1514


def experiment(args: argparse.Namespace) -> str:
    trace_list = ", ".join(f'{{ generator = "{t.split("-")[0]}", seed = {t.split("-")[1]} }}' for t in args.traces.split(","))
    abrs = ", ".join(f'"{a}"' for a in args.abrs.split(","))
    return f"""
[experiment]
name = "pensieve_sim_check"
topology = "dumbbell"
duration = "{args.duration}"
tcp_congestion_control = "cubic"
sample_interval = "1s"
[links.bottleneck.forward]
trace = {{ generator = "fcc", seed = 1 }}
qdisc = {{ kind = "pfifo", limit = 60 }}
[links.bottleneck.reverse]
rate = "10mbit"
[apps.video]
kind = "dash"
server = "h1"
client = "s1"
transport = "tcp"
http_server = "caddy"
ladder = "abr_quic_tcp"
clip = "{args.clip}"
abr = "bola"
max_buffer = "12s"
threshold = "1s"
[sweep]
"apps.video.abr" = [{abrs}]
"links.bottleneck.forward.trace" = [{trace_list}]
"""


def run_config(run_dir: Path) -> tuple[str, traces.Trace]:

    cfg = RunFolder(run_dir).config()
    trace = cfg["links"]["bottleneck"]["forward"]["trace"]
    return cfg["apps"]["video"]["abr"], traces.generate(trace["generator"], seed=int(trace["seed"]))


def simulate(abr: str, trace: traces.Trace, rows: list[SegmentRow], args: argparse.Namespace) -> sim.Record:
    video = sorted((r for r in rows if r.stream == "video"), key=lambda r: r.index)
    audio = [r.bitrate_bps for r in rows if r.stream == "audio" and r.bitrate_bps is not None]
    config = sim.SimConfig(clip_s=parse_time("--clip", args.clip), max_buffer_s=12.0, threshold_s=1.0, rtt_s=args.rtt,
                           payload_fraction=PAYLOAD_FRACTION, audio_bps=float(np.mean(audio)) if audio else 0.0,
                           step_s=0.1, horizon_s=parse_time("--duration", args.duration) + 600.0)
    pool = sim.trace_pool([trace], config)
    start = video[0].t_request or 0.0
    chooser = sim.RegistryPolicy(name=abr, max_buffer_s=config.max_buffer_s)
    return sim.simulate(pool.sessions(np.array([0]), np.array([start])), chooser, video=sim.video_of(config),
                        config=config, step_s=config.step_s)


def compare(run_dir: Path, args: argparse.Namespace) -> bool | None:
    manifest = RunFolder(run_dir).json(MANIFEST)
    if manifest.get("status") != "completed":
        print(f"{run_dir.name}: {manifest.get('status')}: {manifest.get('reason')}")
        return None
    abr, trace = run_config(run_dir)
    rows = RunFolder(run_dir).segments()
    video = sorted((r for r in rows if r.stream == "video"), key=lambda r: r.index)
    rec = simulate(abr, trace, rows, args)
    n = len(video)
    emu_rate = float(np.mean([r.bitrate_bps for r in video]))
    sim_rate = float(rec.avg_bitrate_bps[0] if n == rec.levels.shape[1] else rec.bitrates_bps[rec.levels[0, :n]].mean())
    emu_stall, sim_stall = sum(r.stall_s for r in rows), float(rec.stall_s[0, :n].sum())
    emu_qoe = qoe.qoe_eq1([float(r.bitrate_bps or 0) for r in video], emu_stall)
    sim_qoe = qoe.qoe_eq1(rec.bitrates_bps[rec.levels[0, :n]].tolist(), sim_stall)
    ratio = sim_rate / emu_rate
    rate_ok = BITRATE_TOLERANCE[0] <= ratio <= BITRATE_TOLERANCE[1]
    stall_ok = abs(sim_stall - emu_stall) <= max(REBUFFER_TOLERANCE_S, REBUFFER_TOLERANCE_FRAC * emu_stall)
    print(f"{run_dir.name:<44} {n:>3} {emu_rate / 1e3:7.0f} {sim_rate / 1e3:7.0f} {ratio:6.3f} "
          f"{emu_stall:7.2f} {sim_stall:7.2f} {emu_qoe:7.1f} {sim_qoe:7.1f}  {'ok' if rate_ok and stall_ok else 'OUT'}")
    print(f"{'':<44} levels emulated {[r.level for r in video]}\n{'':<44} levels simulated {rec.levels[0, :n].tolist()}")
    return rate_ok and stall_ok


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--abrs", default="bba,bola,mpc_fast,pensieve")
    p.add_argument("--traces", default="fcc-1,hsdpa-1", help="generator-seed,...")
    p.add_argument("--clip", default="40s")
    p.add_argument("--duration", default="60s")
    p.add_argument("--rtt", type=float, default=0.002, help="the simulator's RTT, s")
    p.add_argument("--runtime", default="host")
    p.add_argument("--results", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    p.add_argument("--reuse", action="store_true", help="compare the run folders in --results, run nothing")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        out = args.results.resolve() if args.results else Path(tmp)
        if not args.reuse:
            exp = Path(tmp) / "pensieve_sim_check.toml"
            exp.write_text(experiment(args))
            subprocess.run([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", args.runtime,
                            "--results", str(out), "--no-plot"], check=False)  # a failed run is reported below
        print(f"\n{'run':<44} {'n':>3} {'emu kb/s':>7} {'sim':>7} {'ratio':>6} {'emu reb':>7} {'sim reb':>7} "
              f"{'emu QoE':>7} {'sim QoE':>7}")
        verdicts = [compare(d, args) for d in run_dirs(out / "pensieve_sim_check")]
    ok = [v for v in verdicts if v is not None]
    print(f"\n{sum(ok)}/{len(verdicts)} runs within tolerance (bitrate ratio {BITRATE_TOLERANCE[0]}-{BITRATE_TOLERANCE[1]}, "
          f"rebuffer within max({REBUFFER_TOLERANCE_S:g} s, {REBUFFER_TOLERANCE_FRAC:.0%}))")
    return 0 if ok and all(ok) and len(ok) == len(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
