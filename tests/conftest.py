from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def our_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if re.match(r"nx[0-9a-f]{6}-", n) or n.startswith("nxforeign")]


def our_temp_dirs() -> list[str]:
    """Private temporary folders of runs (``RunState.temp_dir``: web roots, capture spools)."""
    return sorted(str(p) for p in Path(tempfile.gettempdir()).iterdir() if re.match(r"nx[0-9a-f]{6}-[a-z]+-", p.name))


def child_processes(names: tuple[str, ...] = ("iperf3", "sipp", "httperf", "caddy", "nginx", "tcpdump", "chromium",
                                             "gpac")) -> list[str]:
    """Traffic tools and VMs still running (qemu's name is longer than pgrep -x can match)."""
    out = subprocess.run(["pgrep", "-a", "-x", "|".join(names)], capture_output=True, text=True, check=False).stdout
    out += subprocess.run(["pgrep", "-a", "-f", "^qemu-system-x86_64"], capture_output=True, text=True,
                          check=False).stdout
    return [line for line in out.splitlines() if "<defunct>" not in line]  # zombies hold no resources


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nest_experiments", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})}, check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The project's own markers (setup.cfg) carry the plugin's: ``integration`` is ``nest_integration`` (root), ``vm``
    is ``nest_vm`` (pie/fq_pie/netem), so that ``-m vm`` / ``-m "not vm"`` choose the suites (setup.sh)."""
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.nest_integration)
        if item.get_closest_marker("vm"):
            item.add_marker(pytest.mark.nest_vm)


@pytest.fixture
def no_leftovers():  # type: ignore[no-untyped-def]
    """Asserts that the test left no namespace of ours, no temporary folder and no traffic process behind."""
    before, temp_before = set(our_namespaces()), set(our_temp_dirs())
    yield
    assert set(our_namespaces()) - before == set(), "namespaces left behind"
    assert set(our_temp_dirs()) - temp_before == set(), "temporary folders left behind"
    assert child_processes() == [], "processes left behind"
