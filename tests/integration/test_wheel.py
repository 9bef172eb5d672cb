"""The package as another project's venv gets it: a wheel built from this clone, installed into a fresh venv outside
the clone, run from a folder outside it: ``doctor``, ``run --check`` on the default, a short run on the host kernel.

The dependencies come from a wheelhouse (``NEST_EXP_WHEELHOUSE``, default ``/var/cache/nest_experiments/wheelhouse``)
filled from PyPI once per ``requirements.txt`` (``pip wheel -r requirements.txt``) and kept, like pip's own cache, so
that a repeat installs offline (``--no-index``) in well under a minute; the wheel's dependencies are resolved from its
own metadata, pinned by ``requirements.txt`` as constraints, so a dependency missing from ``setup.cfg`` fails here.
Everything else (the copy of the sources the wheel is built from, the venv, HOME, the cache, the results) lives in
one temporary folder, removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments import resources
from nest_experiments.dash import players
from tests.conftest import ROOT, cli

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a host run)")]

WHEELHOUSE = Path(os.environ.get("NEST_EXP_WHEELHOUSE", "/var/cache/nest_experiments/wheelhouse"))
BUILD_REQUIREMENTS = ("setuptools==84.2.1",)  # the build backend (pyproject.toml: setuptools>=65), offline too
BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in")
RUN = "qdisc-pfifo-100_r1"  # dumbbell_fifo: HTB + pfifo on the host kernel


def _wheelhouse() -> Path:
    """The wheelhouse, filled from PyPI when requirements.txt (or the build backend's pin) changed."""
    want = hashlib.sha256((ROOT / "requirements.txt").read_bytes() + repr(BUILD_REQUIREMENTS).encode()).hexdigest()
    stamp = WHEELHOUSE / ".requirements.sha"
    if stamp.is_file() and stamp.read_text() == want:
        return WHEELHOUSE
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    _ok([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(WHEELHOUSE), "-r", str(ROOT / "requirements.txt"),
         *BUILD_REQUIREMENTS], timeout=900)
    stamp.write_text(want)
    return WHEELHOUSE


def _ok(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _copy_sources(dest: Path) -> None:
    """What a clone holds that the build reads: the build files, the package and resources.SHIPPED (the build itself
    must not write build/ and *.egg-info into the clone)."""
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "nest_experiments", dest / "nest_experiments", ignore=shutil.ignore_patterns("__pycache__"))
    for rel in (*resources.SHIPPED, *resources.SHIPPED_IF_PRESENT):
        src = ROOT / rel
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest / rel)
        elif src.is_file():
            shutil.copy2(src, dest / rel)


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(the fresh venv's python, a working folder outside the clone, the environment to run it in)."""
    wheels = _wheelhouse()
    tmp = Path(tempfile.mkdtemp(prefix="nest-wheel-"))
    try:
        src, dist, work, home = tmp / "src", tmp / "dist", tmp / "work", tmp / "home"
        for d in (src, work, home):
            d.mkdir()
        _copy_sources(src)
        _ok([sys.executable, "-m", "venv", str(tmp / "venv")], timeout=120)
        pip = [str(tmp / "venv" / "bin" / "python"), "-m", "pip"]
        offline = ["--no-index", "--find-links", str(wheels)]
        _ok([*pip, "wheel", "-q", "--no-deps", *offline, "-w", str(dist), str(src)], timeout=300)
        (wheel,) = dist.glob("nest_experiments-*.whl")
        _ok([*pip, "install", "-q", *offline, "-c", str(ROOT / "requirements.txt"), str(wheel)], timeout=600)
        shutil.rmtree(src)  # the installed package must not need the sources it was built from
        env = {"PATH": f"{tmp / 'venv' / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": str(home), "XDG_CACHE_HOME": str(tmp / "cache"), "LC_ALL": "C.UTF-8",
               **({"CI": os.environ["CI"]} if "CI" in os.environ else {})}
        yield tmp / "venv" / "bin" / "python", work, env
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _tool(installed: tuple[Path, Path, dict[str, str]], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    python, work, env = installed
    return subprocess.run([str(python), "-m", "nest_experiments", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_the_installed_package_reads_its_own_copy_of_the_data(installed: tuple[Path, Path, dict[str, str]]) -> None:
    python, work, env = installed
    probe = ("import nest_experiments, nest_experiments.resources as r; "
             "print(nest_experiments.__file__); print(r.installed()); print(r.data_root())")
    out = _ok([str(python), "-c", probe], cwd=work, env=env).stdout.split()
    venv = python.parents[1]
    assert Path(out[0]).is_relative_to(venv) and out[1] == "True", out
    assert Path(out[2]) == Path(out[0]).parent / "_data"
    shipped = {p.relative_to(out[2]).as_posix() for p in Path(out[2]).rglob("*") if p.is_file()}
    assert {"qdisc/kinds.toml", "topologies/dumbbell.toml", "media/ladders/abr_quic_tcp.toml",
            "experiments/dumbbell_fifo.toml", "web/dashjs_player.html"} <= shipped
    assert (resources.DASHJS_SCRIPT in shipped) == (ROOT / resources.DASHJS_SCRIPT).is_file()


def test_doctor(installed: tuple[Path, Path, dict[str, str]]) -> None:
    proc = _tool(installed, "doctor", "--no-vm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith(("  ok ", "  NO "))}
    assert rows["nest"].startswith("  ok ")
    # dash.js runs from the wheel exactly when it runs from the clone: its page and build were shipped and found
    assert rows["dashjs"].startswith("  ok ") == (players.missing("dashjs") is None), rows["dashjs"]
    assert "experiments run on:" in proc.stdout


def test_run_check_lists_the_default_s_runs_as_the_clone_does(installed: tuple[Path, Path, dict[str, str]]) -> None:
    proc = _tool(installed, "run", "--check")
    assert proc.returncode == 0, proc.stderr
    clone = cli("run", "--check")
    assert clone.returncode == 0, clone.stderr
    assert proc.stdout.splitlines() == clone.stdout.splitlines() and len(proc.stdout.splitlines()) >= 2


def test_a_short_host_run_completes_into_results_in_the_working_folder(
        no_leftovers: None, installed: tuple[Path, Path, dict[str, str]]) -> None:
    """A shipped experiment by name (dumbbell_fifo: HTB + pfifo, one iperf3 flow here, 4 s) on the host kernel,
    plotted as ``run`` does."""
    proc = _tool(installed, "run", "dumbbell_fifo", "--runtime", "host", "--only", RUN,
                 "--set", "experiment.duration=4s", "--set", "apps.bulk.flows=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = installed[1] / "results" / "dumbbell_fifo" / RUN
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["runtime"] == "host"
    assert set(pd.read_csv(run_dir / "qdisc.csv").kind) == {"htb", "pfifo"}
    iperf = pd.read_csv(run_dir / "iperf3.csv")
    assert iperf.flow.nunique() == 1 and iperf.bits_per_second.max() > 1e6
    assert (installed[1] / "results" / "dumbbell_fifo" / "report" / "report.md").is_file(), proc.stdout
