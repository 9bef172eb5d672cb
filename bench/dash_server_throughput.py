"""DASH server throughput per CPU core, unshaped loopback in a private namespace.

For each transport the server (``nest_experiments.dash.server``) and the fetcher
CLI run in a fresh namespace ``nxt<hex>``; the client fetches one object
repeatedly until ``--total-mb`` have moved. Printed per transport: goodput
(client view), server CPU seconds (utime + stime from /proc while serving),
Mbit/s per server CPU-second, client CPU seconds; then the ratio h3/tcp of
Mbit per server CPU-second. Needs root.

    sudo .venv/bin/python bench/dash_server_throughput.py [--total-mb 200] [--object-mb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

KINDS = ("tcp", "mptcp", "h2", "h3")
TICK = os.sysconf("SC_CLK_TCK")
DATAGRAM = 1200  # QUIC max datagram size, set by --quic-max-datagram


@dataclass(frozen=True)
class Figures:
    kind: str
    megabytes: float
    wall_s: float
    goodput_mbps: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def mbit_per_cpu_s(self) -> float:
        return self.megabytes * 8 / self.server_cpu_s if self.server_cpu_s else float("nan")


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def start_server(ns: str, root: Path, kind: str) -> tuple[subprocess.Popen[str], int]:
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "nest_experiments.dash.server",
           "--root", str(root), "--bind", "127.0.0.1", f"--port-{kind}", "0",
           "--quic-max-datagram", str(DATAGRAM)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline() or "{}")
    if not ready.get("ready"):
        proc.kill()
        raise SystemExit(f"server for {kind} did not start")
    return proc, int(ready["ports"][kind])


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fetch(ns: str, kind: str, port: int, repeat: int) -> list[dict[str, float]]:
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "nest_experiments.dash.transports",
           "--kind", kind, "--host", "127.0.0.1", "--port", str(port), "--insecure",
           "--get", "video=/object.bin", "--repeat", str(repeat),
           "--quic-max-datagram", str(DATAGRAM)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if '"summary"' not in line]


def measure(ns: str, root: Path, kind: str, repeat: int) -> Figures:
    server, port = start_server(ns, root, kind)
    try:
        cpu0, ccpu0, wall0 = cpu_seconds(server.pid), client_cpu(), time.monotonic()
        results = fetch(ns, kind, port, repeat)
        wall = time.monotonic() - wall0
        server_cpu, ccpu = cpu_seconds(server.pid) - cpu0, client_cpu() - ccpu0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    nbytes = sum(r["bytes"] for r in results)
    span = results[-1]["t_last_byte"] - results[0]["t_request"]
    return Figures(kind, nbytes / 1e6, wall, nbytes * 8 / span / 1e6, server_cpu, ccpu)


def report(figures: list[Figures]) -> None:
    print(f"{'transport':9} {'MB':>6} {'wall s':>7} {'Mbit/s':>8} {'srv CPU s':>9} "
          f"{'Mbit/CPU-s':>10} {'cli CPU s':>9}")  # fmt: skip
    for f in figures:
        print(f"{f.kind:9} {f.megabytes:6.0f} {f.wall_s:7.2f} {f.goodput_mbps:8.1f} "
              f"{f.server_cpu_s:9.2f} {f.mbit_per_cpu_s:10.1f} {f.client_cpu_s:9.2f}")  # fmt: skip
    by_kind = {f.kind: f for f in figures}
    if "h3" in by_kind and "tcp" in by_kind:
        ratio = by_kind["h3"].mbit_per_cpu_s / by_kind["tcp"].mbit_per_cpu_s
        print(f"server efficiency h3/tcp (Mbit per CPU-second): {ratio:.4f} "
              f"(tcp costs {1 / ratio:.0f}x less CPU per bit)")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--total-mb", type=int, default=200)
    p.add_argument("--object-mb", type=int, default=20)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--quic-max-datagram", type=int, default=1200)
    args = p.parse_args()
    global DATAGRAM
    DATAGRAM = args.quic_max_datagram
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    ns = "nxt" + secrets.token_hex(4)
    with tempfile.TemporaryDirectory(prefix="nxt-bench-") as tmp:
        root = Path(tmp)
        (root / "object.bin").write_bytes(os.urandom(args.object_mb * 1_000_000))
        run("ip", "netns", "add", ns)
        try:
            run("ip", "-n", ns, "link", "set", "lo", "up")
            repeat = max(1, args.total_mb // args.object_mb)
            report([measure(ns, root, kind, repeat) for kind in args.kinds.split(",")])
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
