"""The examples/ scripts run: each rebuilds a paper figure from ``results.load`` alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.unit.sweep_synth import make_sweep

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's package, not whichever the venv has installed


def test_queue_delay_per_target_rebuilds_fig12(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, reps=2, targets=(5, 10))
    png = tmp_path / "fig12.png"
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "queue_delay_per_target.py"), str(sweep), str(png)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV, check=False)
    assert out.returncode == 0, out.stderr
    means = {tuple(line.split(":")[0].split()): float(line.split("mean ")[1].split()[0])
             for line in out.stdout.splitlines()}
    # sweep_synth: PIE measures 1.2 x target; FQ-PIE 2 x target + the repetition (1, 2: mean + 1.5)
    assert means == {("pie", "5ms"): pytest.approx(6.0), ("fq_pie", "5ms"): pytest.approx(11.5),
                     ("pie", "10ms"): pytest.approx(12.0), ("fq_pie", "10ms"): pytest.approx(21.5)}
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width >= 800 and image.height >= 300
        image.load()


def test_the_example_says_what_a_sweep_lacks(tmp_path: Path) -> None:
    real = ROOT / "tests" / "data" / "run_folders" / "cluster_short"
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "queue_delay_per_target.py"), str(real),
                          str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120, cwd=ROOT, env=ENV, check=False)
    assert out.returncode == 1 and not (tmp_path / "x.png").exists()
    assert "must sweep a qdisc kind and target (swept: links.bottleneck.qdisc.kind, " in out.stderr
