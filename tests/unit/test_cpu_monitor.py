"""Per-app CPU seconds: the last reading of each process, kept after it exits."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from nest_experiments.collectors.cpu import CpuMonitor
from nest_experiments.net.procs import wait_exited


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

    from nest_experiments.net.procs import _die_with_parent
    code = ("import ctypes, threading\nslack = lambda: print(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))\n"
            "slack()\nt = threading.Thread(target=slack)\nt.start(); t.join()")  # 30: PR_GET_TIMERSLACK
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=functools.partial(_die_with_parent, 5_000_000)).stdout.split()
    assert out == ["5000000", "5000000"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=_die_with_parent).stdout.split()
    assert out == ["50000", "50000"]  # the kernel's default


# a process that starts a child burning 0.6 s of CPU, reaps it, and exits at once (as the DASH player does with its
# quic-go fetcher): the child's CPU reaches the app only through the parent's reading as a zombie
PARENT_OF_BUSY_CHILD = ("import subprocess, sys\n"
                        "subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
                        "while time.process_time()-t<0.6: pass'])\n")


def test_the_cpu_of_children_reaped_just_before_exit_counts() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT_OF_BUSY_CHILD])
    procs = {"player": [parent]}
    mon = CpuMonitor(time.monotonic, interval_s=5.0,  # no periodic reading after the start: only the exit's
                     pids_by_app=lambda: {a: [p.pid for p in ps if p.returncode is None] for a, ps in procs.items()})
    mon.start()
    assert wait_exited(parent, timeout_s=20)
    assert parent.returncode is None and os.path.exists(f"/proc/{parent.pid}")  # exited, not reaped
    mon.read_exited("player", parent.pid)
    assert parent.wait() == 0
    mon.stop()
    assert 0.55 <= mon.app_cpu_s()["player"] <= 2.0


def test_wait_exited_times_out_on_a_live_process() -> None:
    proc = subprocess.Popen(["sleep", "5"])
    try:
        t = time.monotonic()
        assert not wait_exited(proc, timeout_s=0.2)
        assert 0.2 <= time.monotonic() - t < 1.0 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
