"""Programs started in a namespace (net.procs.popen_in_ns): in it, with their timer slack, and gone with the
process that started them, even after a ``kill -9`` (setpriv's parent-death signal, no preexec_fn)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

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
    name = f"nx{secrets.token_hex(3)}-procs"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True, capture_output=True)


def _alive(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


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
        assert _alive(pid)  # the same pid through ip netns exec, setpriv and sh: what the runner waits for
        starter.kill()  # SIGKILL: no handler of ours runs
        starter.wait()
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the program outlived the process that started it"
    finally:
        starter.kill()
        starter.wait()
