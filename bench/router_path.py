"""The router runtime against the prototype of issue 52: the guest path's own latency, and PIE / FQ-PIE / netem
through it at 5, 10 and 20 Mbit/s.

    sudo .venv/bin/python bench/router_path.py [--duration 30s] [--pings 1000] [--load 0,2,4]
                                               [--skip-path | --skip-links]

Part 1, the path: one router guest per setting with two links (the default experiment's two bottlenecks),
nothing shaped, ``ping -i 0.01`` through both at once (net.routed.calibrate): RTT min / p50 / p99 / max, against
a host veth's (the prototype: 0.05 / 0.11-0.16 / 0.2-2.8 ms) and the target p99 <= 1 ms added. Settings: qemu
under the normal scheduler or at SCHED_FIFO 1 (vm.router.router_priority), each with 0, 2 and 4 busy loops
beside it (the host's applications), and 2 vCPUs (not at FIFO: vm.router refuses as many vCPUs as host
CPUs at FIFO).

Part 2, the links: ``run`` (the router runtime, one guest for the sweep) of the dumbbell with 5 CUBIC iperf3
flows, HTB at 5 / 10 / 20 Mbit/s with PIE or FQ-PIE at a 5 ms target on the forward egress and 20 ms of netem on
the way back, one run per cell: goodput, utilization at the qdisc, the qdisc's mean delay (PIE's own; FQ-PIE
reports none, so the captures' per-packet mean), the guest's busy share, qemu's CPU on the host, and iperf3's
mean RTT (netem's 20 ms plus the queue). Ratios: delay / target, utilization / 1 (the prototype: PIE 5.1-5.7 ms,
0.84-0.98; with HTB's 15 kB burst 0.96-1.00).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.analysis.utilization import egress_figures, iperf3_goodput_bps  # noqa: E402
from nest_experiments.rundir import MANIFEST, RunFolder  # noqa: E402

EXPERIMENT = """
[experiment]
name = "router_bench"
topology = "dumbbell"
duration = "{duration}"
tcp_congestion_control = "cubic"
sample_interval = "100ms"
sample_links = ["bottleneck"]
qdelay_links = ["bottleneck"]

[links.bottleneck]
rate = "10mbit"
forward = {{ qdisc = {{ kind = "pie", target = "5ms" }} }}
reverse = {{ delay = "20ms" }}

[apps.bulk]
kind = "iperf3"
src = "h1"
dst = "s1"
flows = 5

[sweep]
"links.bottleneck.forward.qdisc.kind" = ["pie", "fq_pie"]
"links.bottleneck.rate" = ["5mbit", "10mbit", "20mbit"]
"""


def path_part(pings: int, loads: list[int]) -> None:
    from nest_experiments.net.routed import calibrate
    from nest_experiments.vm.router import RouterVM

    print(f"guest path, 2 links at once, {pings} pings each at 10 ms (host veth: 0.05 / 0.11-0.16 / 0.2-2.8 ms);")
    print("load: busy loops at normal priority beside it (the run's applications); qemu at SCHED_FIFO 1 or not")
    print(f"{'setting':<22} {'boot s':>7} {'min':>7} {'p50':>7} {'p99':>7} {'max':>7} {'lost':>5} {'p99/1ms':>8}")
    settings = [(1, fifo, load) for load in loads for fifo in (0, 1)] + [(2, 0, loads[0])]  # 2 vCPUs: no FIFO
    for cpus, fifo, load in settings:
        with RouterVM(slots=2, missing=frozenset({"pie", "fq_pie", "netem"}), console=None, cpus=cpus,
                      fifo=fifo) as r:
            hogs = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"]) for _ in range(load)]
            try:
                f = calibrate(r, pings=pings)["all"]
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
        name = f"{cpus} vCPU {'FIFO 1' if fifo else 'normal'} +{load}"
        print(f"{name:<22} {r.boot_s:>7.1f} {f['min_ms']:>7.3f} {f['p50_ms']:>7.3f} {f['p99_ms']:>7.3f} "
              f"{f['max_ms']:>7.2f} {f['sent'] - f['received']:>5} {f['p99_ms'] / 1.0:>8.2f}", flush=True)


def links_part(duration: str) -> int:
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        exp = Path(tmp) / "router_bench.toml"
        exp.write_text(EXPERIMENT.format(duration=duration))
        proc = subprocess.run([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", "router",
                               "--results", tmp, "--no-plot"], capture_output=True, text=True, check=False)
        runs = sorted(p.parent for p in Path(tmp).glob(f"*/*/{MANIFEST}"))
        if proc.returncode != 0 or not runs:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        print(f"\nlinks: 5 CUBIC flows, {duration} per cell, target 5 ms, 20 ms netem back (one guest, 1 vCPU)")
        print(f"{'cell':<22} {'goodput':>8} {'util':>5} {'delay ms':>8} {'/target':>7} {'guest':>6} {'qemu':>5} "
              f"{'iperf RTT':>9} {'saturated':>9}")
        for run_dir in runs:
            m = json.loads((run_dir / MANIFEST).read_text())
            (fwd,) = [f for f in egress_figures(run_dir) if f.node == "r1"]
            goodput = (iperf3_goodput_bps(run_dir) or 0.0) / 1e6
            delay = fwd.mean_delay_ms
            if delay is None:  # FQ-PIE reports no delay: the captures' per-packet mean
                qs = RunFolder(run_dir).json("qdelay_summary.json")["egresses"][0]
                delay = qs["mean_per_packet_ms"]
            rtt = _iperf_rtt_ms(run_dir)
            router = m.get("router", {})
            print(f"{run_dir.name:<22} {goodput:>8.2f} {fwd.utilization or 0:>5.2f} {delay:>8.2f} {delay / 5:>7.2f} "
                  f"{router.get('guest_busy_mean', float('nan')):>6.2f} {router.get('qemu_cpu_share', float('nan')):>5.2f} "
                  f"{rtt:>9.1f} {m['cpu']['saturated_windows']:>9} {_rules(m['cpu'])}")
    return 0


def _rules(cpu: dict[str, object]) -> str:
    by = cpu.get("saturated_by") or {}
    return ",".join(f"{k}={v}" for k, v in by.items() if v) if isinstance(by, dict) else ""


def _iperf_rtt_ms(run_dir: Path) -> float:
    rows = RunFolder(run_dir).rows("iperf3_summary.csv")
    values = [float(r["mean_rtt_ms"]) for r in rows if r.get("mean_rtt_ms")]
    return sum(values) / len(values) if values else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", default="30s")
    p.add_argument("--pings", type=int, default=1000)
    p.add_argument("--load", default="0,2,4", help="busy loops beside the path part, per setting (default 0,2,4)")
    p.add_argument("--skip-path", action="store_true")
    p.add_argument("--skip-links", action="store_true")
    args = p.parse_args()
    if not args.skip_path:
        path_part(args.pings, [int(n) for n in args.load.split(",")])
    return 0 if args.skip_links else links_part(args.duration)


if __name__ == "__main__":
    sys.exit(main())
