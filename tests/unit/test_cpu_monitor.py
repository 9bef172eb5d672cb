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


def test_cpu_used_before_the_start_is_not_counted() -> None:
    # a server that burns 0.6 s (its imports, say) before the run starts, then idles
    code = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
            "print('ready', flush=True)\ntime.sleep(0.8)")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert server.stdout is not None and server.stdout.readline() == b"ready\n"
    mon = CpuMonitor(time.monotonic, interval_s=0.1,
                     pids_by_app=lambda: {"server": [server.pid] if server.poll() is None else []})
    mon.start()
    server.wait()
    mon.stop()
    assert mon.app_cpu_s()["server"] < 0.2
    assert 0 <= mon.breakdown()["runner_cpu_s"] < 0.5


def test_timer_slack_reaches_the_program_and_its_threads() -> None:
    import functools

    from nest_experiments.procs import _die_with_parent
    code = ("import ctypes, threading\nslack = lambda: print(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))\n"
            "slack()\nt = threading.Thread(target=slack)\nt.start(); t.join()")  # 30: PR_GET_TIMERSLACK
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=functools.partial(_die_with_parent, 5_000_000)).stdout.split()
    assert out == ["5000000", "5000000"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=_die_with_parent).stdout.split()
    assert out == ["50000", "50000"]  # the kernel's default
