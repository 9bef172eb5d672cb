"""Bytes each path of the multi-homed dumbbell carried towards h2, read from the routers while a run is up."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

from nest_experiments.runs.runner import Run


def ns_of(run: Run, node: str) -> str:
    return f"{run.manifest['prefix']}-{node}"


def tx_bytes(run: Run, node: str, dev: str) -> int:
    out = subprocess.run(["ip", "-n", ns_of(run, node), "-s", "-j", "link", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


def sample_paths(run: Run, counters: dict[str, int], also: Callable[[Run], None] | None = None) -> None:
    """Until the run's network is gone: r1's and r2's bytes sent to h2 into ``counters`` (and ``also(run)``)."""
    end = time.monotonic() + 600
    while time.monotonic() < end:
        try:
            counters.update({node: tx_bytes(run, node, "h2") for node in ("r1", "r2")})
            if also is not None:
                also(run)
        except (KeyError, subprocess.CalledProcessError, ValueError, IndexError):
            if counters:
                return
        time.sleep(0.2)
