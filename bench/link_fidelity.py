"""Link fidelity: utilization at the qdisc and iperf3 goodput / configured rate.

    sudo .venv/bin/python bench/link_fidelity.py [--rates 5mbit,10mbit,50mbit] [--duration 15s] [--runtime host]

Runs the dumbbell with 5 CUBIC flows through an HTB + pfifo bottleneck at
each rate (in the VM runtime when asked) and prints, per rate: bytes the
qdisc sent / what the rate allows (steady part), and iperf3 goodput / rate.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from nest_experiments.analysis.utilization import egress_figures, iperf3_goodput_bps
from nest_experiments.rundir import run_dirs


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="5mbit,10mbit,50mbit")
    p.add_argument("--duration", default="15s")
    p.add_argument("--runtime", default="host")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        exp = Path(tmp) / "fidelity.toml"
        rates = ", ".join(f'"{r}"' for r in args.rates.split(","))
        exp.write_text(f"""
[experiment]
name = "fidelity"
duration = "{args.duration}"
[links.bottleneck.forward]
qdisc = {{ kind = "pfifo", limit = 200 }}
[apps.bulk]
kind = "iperf3"
src = "h1"
dst = "s1"
flows = 5
[sweep]
"links.bottleneck.rate" = [{rates}]
""")
        subprocess.run([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", args.runtime,
                        "--results", tmp, "--no-plot"], check=True)
        print(f"{'run':<24} {'rate':>10} {'util@qdisc':>11} {'goodput/rate':>13}")
        for run_dir in run_dirs(Path(tmp) / "fidelity"):
            (fwd,) = [f for f in egress_figures(run_dir) if f.node == "r1"]
            goodput = iperf3_goodput_bps(run_dir) or 0.0
            rate = fwd.rate_bps or 1
            print(f"{run_dir.name:<24} {rate / 1e6:>8g}M {fwd.utilization or 0:>11.3f} {goodput / rate:>13.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
