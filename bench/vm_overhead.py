"""VM overhead: boot time and the per-run overhead inside one VM for a sweep of 4 short runs.

    sudo .venv/bin/python bench/vm_overhead.py [--duration 5s]

One VM serves the whole sweep. Prints the VM's wall time, the boot time, the
sum of the runs' own durations, and the overhead per run (run wall time minus
its configured duration: topology, servers, teardown, Python under TCG).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--duration", default="5s")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        exp = Path(tmp) / "overhead.toml"
        exp.write_text(f"""
[experiment]
name = "overhead"
duration = "{args.duration}"
[links.bottleneck.forward]
qdisc = {{ kind = "pie", target = "5ms" }}
[apps.bulk]
kind = "iperf3"
src = "h1"
dst = "s1"
flows = 2
[sweep]
"links.bottleneck.forward.qdisc.target" = ["5ms", "10ms", "15ms", "20ms"]
""")
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", "vm",
                               "--results", tmp, "--no-plot"], capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        boot = [line for line in proc.stderr.splitlines() if "boot" in line.lower()]
        runs = []
        for m in sorted(Path(tmp, "overhead").glob("*/manifest.json")):
            data = json.loads(m.read_text())
            span = (datetime.fromisoformat(data["finished"]) - datetime.fromisoformat(data["started"])).total_seconds()
            runs.append((m.parent.name, span, data["duration_s"]))
        print(f"VM wall time for {len(runs)} runs: {wall:.1f} s")
        for line in boot[:2]:
            print(f"console: {line.strip()}")
        first = min((json.loads(m.read_text())["started"] for m in Path(tmp, "overhead").glob("*/manifest.json")),
                    default=None)
        for name, span, duration in runs:
            print(f"{name:<16} run {span:6.1f} s, configured {duration:g} s, overhead {span - duration:5.1f} s")
        if runs:
            over = sum(s - d for _, s, d in runs) / len(runs)
            print(f"mean overhead per run inside the VM: {over:.1f} s; VM start + imports before the first run: "
                  f"{wall - sum(s for _, s, _ in runs):.1f} s (first run started {first})")
        return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
