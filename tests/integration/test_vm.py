"""The VM runtime for real: boots qemu guests on the host (about 10 s each under TCG).

Marked ``integration`` only: ``vm`` (the plugin's ``nest_vm``) means "needs a kernel
with pie/fq_pie/netem" and would skip these tests on exactly the hosts that
need the VM (and run them inside the guest under ``--nest-runtime vm``).
Set NESTEXP_VM_ACCEL=tcg|kvm to skip the accelerator auto-detection.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nest_experiments.resources import CLONE as PROJECT_ROOT
from nest_experiments.runs import runtime
from nest_experiments.vm import VMTimeoutError, probe, run_in_vm
from nest_experiments.vm.image import cache_dir
from nest_experiments.vm.qemu import guest_clock_params

pytestmark = [pytest.mark.integration]

ACCEL = os.environ.get("NESTEXP_VM_ACCEL", "auto")
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
RUNS = cache_dir() / "runs"


@pytest.fixture(autouse=True)
def _needs_vm() -> None:
    if runtime.current() == "vm":
        pytest.skip("already inside the VM: no nested qemu")
    if os.geteuid() != 0:
        pytest.skip("the VM runtime needs root (9p passthrough shares)")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 not installed (apt-get install qemu-system-x86)")


def _qemus_of(pid: int) -> list[str]:
    """qemu processes started by runner ``pid`` (their share paths contain runs/<pid>-)."""
    proc = subprocess.run(["pgrep", "-af", f"qemu-system.*{RUNS}/{pid}-"], capture_output=True, text=True)
    return [line for line in proc.stdout.splitlines() if line.strip()]


def _wakers_of(pid: int) -> list[int]:
    """The host wakers (busy loops at SCHED_IDLE, see ``vm.host_awake``) that runner ``pid`` started."""
    proc = subprocess.run(["pgrep", "-P", str(pid), "-f", "while True: pass"], capture_output=True, text=True)
    return [int(x) for x in proc.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


GUEST_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    out = sys.argv[1]
    res = {"argv": sys.argv[2:], "cwd": os.getcwd(), "env": os.environ.get("NESTVM_TEST"),
           "kernel": os.uname().release}
    def sh(*argv):
        return subprocess.run(list(argv), capture_output=True, text=True).returncode
    sh("ip", "netns", "add", "t")
    sh("ip", "-n", "t", "link", "add", "va", "type", "veth", "peer", "name", "vb")
    sh("ip", "-n", "t", "link", "set", "va", "up")
    sh("ip", "-n", "t", "link", "set", "vb", "up")
    for kind, args in (("pie", ["pie", "target", "5ms"]), ("fq_pie", ["fq_pie"]),
                       ("netem", ["netem", "delay", "20ms"]), ("fq_codel", ["fq_codel"])):
        rc = sh("tc", "-n", "t", "qdisc", "replace", "dev", "va", "root", *args)
        shown = subprocess.run(["tc", "-n", "t", "-j", "qdisc", "show", "dev", "va"], capture_output=True,
                               text=True).stdout
        res[kind] = rc == 0 and any(q.get("kind") == kind for q in json.loads(shown or "[]"))
    res["htb"] = sh("tc", "-n", "t", "qdisc", "replace", "dev", "vb", "root", "handle", "1:", "htb") == 0
    ksoftirqd = [p for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/comm").read().startswith("ksoftirqd/")]
    res["ksoftirqd"] = [[os.sched_getscheduler(int(p)), os.sched_getparam(int(p)).sched_priority] for p in ksoftirqd]
    res["clocksource"] = open("/sys/devices/system/clocksource/clocksource0/current_clocksource").read().strip()
    with open(os.path.join(out, "result.json"), "w") as fh:
        json.dump(res, fh)
    print("guest says hello")
    sys.exit(3)
""")


def test_run_exit_code_rw_share_and_qdiscs(tmp_path: Path) -> None:
    # tmp_path lives under the host's /tmp, which the guest does not see: it is
    # shared explicitly, so this also checks that mount points are created.
    out = tmp_path / "out"
    out.mkdir()
    odd = "a b; $(false) 'q' \"d\""
    from io import StringIO

    console = StringIO()
    res = run_in_vm([sys.executable, "-c", GUEST_SCRIPT, str(out), odd, ""], cwd=PROJECT_ROOT,
                    rw_dirs=[out], env={**ENV, "NESTVM_TEST": odd}, timeout_s=240, accel=ACCEL, console=console,
                    softirq_fifo=1)
    assert res.exit_code == 3, console.getvalue()
    assert res.accel in ("kvm", "tcg")
    assert 0 < res.boot_s <= res.wall_s
    assert "guest says hello" in console.getvalue()
    assert "@@nestvm" not in console.getvalue()
    got = json.loads((out / "result.json").read_text())
    assert got["argv"] == [odd, ""]
    assert got["env"] == odd
    assert got["cwd"] == str(PROJECT_ROOT)
    assert got["kernel"] == res.guest_kernel != os.uname().release
    assert got["pie"] and got["fq_pie"] and got["netem"] and got["fq_codel"] and got["htb"], got
    assert got["ksoftirqd"] == [[os.SCHED_FIFO, 1]] * 2, got  # one per vCPU, at real-time priority 1
    # TCG on a host with an invariant TSC: the guest keeps the TSC (~13x cheaper per clock read than the HPET)
    expected = ("tsc",) if res.accel == "tcg" and guest_clock_params("tcg") else ("kvm-clock", "tsc", "hpet")
    assert got["clocksource"] in expected, got
    assert not _qemus_of(os.getpid())
    assert not any(RUNS.glob(f"{os.getpid()}-*"))


def test_probe_reports_pie_and_fq_pie() -> None:
    res = probe(accel=ACCEL, timeout_s=240)
    assert res.ok, res.reason
    assert dict(res.qdiscs) == {"pie": True, "fq_pie": True, "netem": True}
    assert res.guest_kernel and res.boot_s > 0 and res.accel in ("kvm", "tcg")


def test_timeout_kills_hanging_guest() -> None:
    t0 = time.monotonic()
    with pytest.raises(VMTimeoutError, match="did not finish"):
        run_in_vm(["sleep", "600"], cwd=Path("/"), rw_dirs=[], env=ENV, timeout_s=25, accel=ACCEL, console=None)
    assert time.monotonic() - t0 < 45
    assert not _qemus_of(os.getpid())
    assert not _wakers_of(os.getpid())
    assert not any(RUNS.glob(f"{os.getpid()}-*"))


RUNNER = textwrap.dedent("""
    import faulthandler, signal, sys
    from pathlib import Path
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for a traceback when it hangs
    # Ctrl-C in a terminal: a test session started in the background (sh's "&") passes SIGINT on ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from nest_experiments.vm import run_in_vm
    run_in_vm(["sleep", "600"], cwd=Path("/"), rw_dirs=[], env={"PATH": "/usr/bin:/bin"},
              timeout_s=600, accel=sys.argv[1], console=None, keep_host_awake=True)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["sigterm", "sigint", "sigkill"])
def test_signal_to_runner_leaves_no_qemu(sig: signal.Signals) -> None:
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, ACCEL], cwd=PROJECT_ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _qemus_of(runner.pid):
            assert runner.poll() is None, runner.stderr.read().decode() if runner.stderr else ""
            assert time.monotonic() < deadline, "qemu never started"
            time.sleep(0.2)
        time.sleep(1.0)
        wakers = _wakers_of(runner.pid)
        assert len(wakers) == os.cpu_count()
        assert all(os.sched_getscheduler(w) == os.SCHED_IDLE for w in wakers)
        runner.send_signal(sig)
        try:
            rc = runner.wait(timeout=30)
        except subprocess.TimeoutExpired:
            runner.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            runner.kill()
            runner.wait()
            err = runner.stderr.read().decode(errors="replace") if runner.stderr else ""
            pytest.fail(f"runner still alive 30 s after {sig.name}; its threads and stderr:\n{err[-6000:]}")
        assert rc != 0
        deadline = time.monotonic() + 15
        while _qemus_of(runner.pid) and time.monotonic() < deadline:  # PDEATHSIG is asynchronous
            time.sleep(0.1)
        assert not _qemus_of(runner.pid)
        while any(_alive(w) for w in wakers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in wakers)
        if sig != signal.SIGKILL:  # a clean exit removes its run folder (kill -9: the next run does)
            assert not any(RUNS.glob(f"{runner.pid}-*"))
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for d in RUNS.glob(f"{runner.pid}-*"):
            shutil.rmtree(d, ignore_errors=True)


TINY_PIE = """
[experiment]
name = "tiny_pie"
topology = "dumbbell"
duration = "5s"
qdelay_links = ["bottleneck"]

[links.bottleneck]
rate = "10mbit"
forward = { qdisc = { kind = "pie", target = "5ms" } }

[apps.bulk]
kind = "iperf3"
src = "h1"
dst = "s1"
flows = 2
"""


def test_cli_run_in_the_vm_writes_the_host_figures(tmp_path: Path) -> None:
    """``run --runtime vm`` end to end: the guest's run, its pcaps matched on the host, the host's load per run."""
    exp = tmp_path / "tiny_pie.toml"
    exp.write_text(TINY_PIE)
    proc = subprocess.Popen([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", "vm",
                             "--results", str(tmp_path / "results"), "--no-plot"], cwd=PROJECT_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "NEST_EXP_SOFTIRQ_FIFO"})  # the default
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    (run_dir,) = (tmp_path / "results" / "tiny_pie").glob("*r1")
    assert not (tmp_path / "results" / ".vm-inputs").exists()  # the copy the guest read (its /tmp is its own)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["runtime"] == "vm"
    assert manifest["vm"]["host_awake"] in ("0", "1")
    assert manifest["vm"]["softirq_fifo"] == "1"
    assert manifest["clocksource"] != "?"
    assert 0.0 <= manifest["host_steal"] <= 1.0 and manifest["host_qemu_cpus"] > 0.05  # qemu ran the traffic
    assert (run_dir / "qdelay.csv").exists() and not (run_dir / "captures").exists()  # matched here, on the host
    assert not _qemus_of(proc.pid)


def test_until_decided_runs_every_block_in_one_vm(tmp_path: Path) -> None:
    """``run --until-decided`` in the VM runtime: two blocks of the under-the-hood objects study (shortened) in one
    guest, which boots and warms up once; each block's runs get the host's load between blocks."""
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nest_experiments", "run", str(PROJECT_ROOT / "experiments/under_hood_objects.toml"),
         "--runtime", "vm", "--results", str(results), "--no-plot", "--until-decided", "--max-reps", "2",
         "--set", "experiment.duration=8s", "--set", "apps.objects.requests=2",
         "--set", 'apps.objects.sizes=["100kb", "200kb"]',
         "--set", 'links.bottleneck.forward={rate = "10mbit", qdisc = {kind = "pfifo", limit = 200}}'],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NEST_EXP_WARMUP": "3"})
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    folder = results / "under_hood_objects"
    manifests = [json.loads(p.read_text()) for p in sorted(folder.glob("*/manifest.json"))]
    assert sorted(m["repetition"] for m in manifests) == [1, 1, 2, 2]
    assert all(m["status"] == "completed" and m["runtime"] == "vm" for m in manifests)
    # each block annotated on the host: qemu's CPU over the run, and its busiest thread in a 1 s window (a vCPU
    # while the run's apps start). A loosened bound: qemu's mean CPU was asked to be > 0.05, now only >= 0; these
    # runs idle most of their 8 s (0.13 CPUs here, under 0.05 once on CI's machine), so the > 0.05 moved to the
    # busiest thread (0.49 here), which only the host's annotation writes
    assert all(m["host_qemu_cpus"] >= 0 and 0 <= m["host_steal"] <= 1 for m in manifests)
    assert all(m["cpu"]["qemu_thread_max"]["share"] > 0.05 for m in manifests)
    assert err.count("until decided: one VM for every block") == 1
    assert err.count(", not recorded") == 1  # one warm-up: the guest stayed warm for block 2
    assert err.count("--max-reps 2 reached") == 1
    records = [json.loads(line) for line in (folder / "sweeps.jsonl").read_text().splitlines()]
    assert [r["block"] for r in records if r.get("side") == "vm_host"] == [1, 2]
    assert len(json.loads((folder / "sequential.json").read_text())["looks"]) == 2
    assert not (results / ".vm-inputs").exists() and not _qemus_of(proc.pid)
