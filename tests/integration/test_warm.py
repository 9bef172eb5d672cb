"""Warm Python processes (net.warm): a taken one runs its module as ``python -m`` would, inside the namespace,
with the app's logs, working directory and timer slack; the rest are released; none is left behind. And the cold
start of any program (net.procs.popen_in_ns): in its namespace, with its timer slack, gone with the process that
started it even after a ``kill -9`` (setpriv's parent-death signal, no preexec_fn)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nest_experiments.net.warm import WarmPool

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

PROBE = textwrap.dedent("""
    import json, os, sys

    def main():
        print(json.dumps({"argv": sys.argv[1:], "name": __name__, "cwd": os.getcwd(),
                          "netns": os.stat("/proc/self/ns/net").st_ino,
                          "slack": int(open("/proc/self/timerslack_ns").read())}))
        print("probe's stderr", file=sys.stderr)
        sys.exit(int(sys.argv[1]))

    if __name__ == "__main__":  # as our programs: the warm process imports it first, then runs it as __main__
        main()
""")


STARTER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from nest_experiments.net.procs import popen_in_ns
    ns, out = sys.argv[1], Path(sys.argv[2])
    with out.open("wb") as fh:
        child = popen_in_ns(ns, ["sh", "-c", "cat /proc/self/timerslack_ns; stat -L -c %i /proc/self/ns/net; "
                                             "exec sleep 600"], stdout=fh, timer_slack_ns=250_000)
    print(child.pid, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"nx{secrets.token_hex(3)}-warm"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True, capture_output=True)


@pytest.fixture
def probe_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``warm_probe`` the warm processes can import (PYTHONPATH, which they inherit)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "warm_probe.py").write_text(PROBE)
    monkeypatch.setenv("PYTHONPATH", str(lib))
    return lib


def alive(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def test_a_taken_process_runs_its_module_in_the_namespace_and_the_rest_are_released(
        ns: str, probe_path: Path, tmp_path: Path) -> None:
    pool = WarmPool()
    pool.start(["warm_probe", "warm_probe"])
    idle = [p.pid for ps in pool._idle.values() for p in ps]
    work = tmp_path / "work"
    work.mkdir()
    out, err = tmp_path / "probe.out", tmp_path / "probe.err"
    try:
        # not ours to run warm: another program, or a module nobody warmed
        assert pool.take(ns, ["iperf3", "-s"], stdout=out) is None
        assert pool.take(ns, [sys.executable, "-m", "json.tool"], stdout=out) is None
        proc = pool.take(ns, [sys.executable, "-m", "warm_probe", "3", "x y"], stdout=out, stderr=err, cwd=work,
                         timer_slack_ns=250_000)
        assert proc is not None and proc.pid == idle[0]
        assert proc.wait(timeout=60) == 3  # its own exit code, to the runner that started it
    finally:
        pool.close()
    seen = json.loads(out.read_text())
    assert seen["argv"] == ["3", "x y"] and seen["name"] == "__main__"
    assert seen["netns"] == os.stat(f"/run/netns/{ns}").st_ino != os.stat("/proc/self/ns/net").st_ino
    assert seen["cwd"] == str(work) and seen["slack"] == 250_000
    assert err.read_text() == "probe's stderr\n"
    assert pool.started == ["warm_probe"]
    assert not alive(idle[1]), "the warm process no app took is left running"
    assert pool.take(ns, [sys.executable, "-m", "warm_probe", "0"], stdout=out) is None  # released: none left


def test_one_log_for_both_streams_and_an_import_error_lands_in_it(ns: str, probe_path: Path, tmp_path: Path) -> None:
    pool = WarmPool()
    pool.start(["warm_probe", "no_such_module_of_ours"])
    log = tmp_path / "both.log"
    log.write_bytes(b"")  # the app truncates its logs; the warm process appends
    try:
        proc = pool.take(ns, [sys.executable, "-m", "warm_probe", "0"], stdout=log)
        assert proc is not None and proc.wait(timeout=60) == 0
        broken = pool.take(ns, [sys.executable, "-m", "no_such_module_of_ours"], stdout=log)
        assert broken is not None and broken.wait(timeout=60) == 1
    finally:
        pool.close()
    text = log.read_text()
    assert "probe's stderr" in text and '"name": "__main__"' in text
    assert "ModuleNotFoundError: No module named 'no_such_module_of_ours'" in text


def test_a_warm_process_dies_with_its_runner(probe_path: Path) -> None:
    """PR_SET_PDEATHSIG, as every process of ours: a killed runner leaves no warm process behind."""
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from nest_experiments.net.warm import WarmPool
        pool = WarmPool()
        pool.start(["warm_probe"])
        print(pool._idle["warm_probe"][0].pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    pid = int(runner.stdout.readline())
    assert alive(pid)
    runner.kill()
    runner.wait()
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.05)
    assert not alive(pid)


def test_a_program_runs_in_its_namespace_with_its_slack_and_dies_with_its_starter(ns: str, tmp_path: Path) -> None:
    out = tmp_path / "child.out"
    starter = subprocess.Popen([sys.executable, "-c", STARTER, ns, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        deadline = time.monotonic() + 20
        while len(out.read_text().split()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        slack, netns = out.read_text().split()
        assert int(slack) == 250_000  # the starter's thread's slack at the fork, kept across the execs
        assert int(netns) == os.stat(f"/run/netns/{ns}").st_ino != os.stat("/proc/self/ns/net").st_ino
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(pid)  # the same pid through ip netns exec, setpriv and sh: what the runner waits for
        starter.kill()  # SIGKILL: no handler of ours runs
        starter.wait()
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the program outlived the process that started it"
    finally:
        starter.kill()
        starter.wait()
