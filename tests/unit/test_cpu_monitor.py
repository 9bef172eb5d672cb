"""Per-app CPU seconds: the last reading of each process, kept after it exits."""

from __future__ import annotations

import subprocess
import sys
import time

from nest_experiments.collectors.cpu import CpuMonitor


def test_app_cpu_seconds_survive_the_process_exit() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.6: pass\n"
                                                   "time.sleep(0.5)"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.2)"])
    procs = {"busy": [busy], "idle": [idle]}
    mon = CpuMonitor(time.monotonic, interval_s=0.1,
                     pids_by_app=lambda: {a: [p.pid for p in ps if p.poll() is None] for a, ps in procs.items()})
    mon.start()
    busy.wait()
    idle.wait()
    mon.stop()
    cpu = mon.app_cpu_s()
    assert 0.5 <= cpu["busy"] <= 1.5
    assert cpu["idle"] < 0.3
