"""procs.stop_all: processes are signalled together, waited for together, and one that ignores the signal is
killed once the shared timeout has passed (not one timeout after another)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from nest_experiments.net.procs import stop_all

STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"


def test_all_signalled_at_once_and_a_stubborn_one_killed_after_the_shared_timeout() -> None:
    stubborn = [subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE) for _ in range(2)]
    for proc in stubborn:
        assert proc.stdout is not None and proc.stdout.readline() == b"1\n"  # its handler is in place
    polite = subprocess.Popen(["sleep", "60"])
    done = subprocess.Popen(["true"])
    done.wait()
    t = time.monotonic()
    codes = stop_all([*stubborn, polite, done], timeout_s=1.0)
    took = time.monotonic() - t
    assert codes == [-signal.SIGKILL, -signal.SIGKILL, -signal.SIGTERM, 0]
    assert 1.0 <= took < 1.9, f"{took:.2f} s: the timeout is shared, not one per process"
