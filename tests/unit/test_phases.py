"""runs.phases: laps of one clock named by the phase they end, and the sweep log's lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nest_experiments.runs.phases import SWEEP_LOG, Laps, append_sweep_record, read_sweep_records


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_laps_name_the_time_since_the_last_lap() -> None:
    clock = FakeClock()
    laps = Laps(clock)
    clock.now += 2.5
    assert laps.lap("topology") == 2.5
    clock.now += 60.0
    laps.lap("traffic")
    clock.now += 1.25
    laps.lap("teardown")
    assert laps.as_dict() == {"topology": 2.5, "traffic": 60.0, "teardown": 1.25}
    assert list(laps.as_dict()) == ["topology", "traffic", "teardown"]  # in the order they ran


def test_a_phase_run_twice_adds_up_and_restart_drops_time() -> None:
    clock = FakeClock()
    laps = Laps(clock)
    clock.now += 1.0
    laps.lap("runs")
    clock.now += 7.0  # e.g. a failed traffic phase: in no phase
    laps.restart()
    clock.now += 2.0
    laps.lap("runs")
    with laps.timed("warmup"):
        clock.now += 30.0
    assert laps.as_dict() == {"runs": 3.0, "warmup": 30.0}


def test_timed_records_the_block_even_when_it_raises() -> None:
    clock = FakeClock()
    laps = Laps(clock)
    clock.now += 5.0  # before the block: not counted
    with pytest.raises(RuntimeError), laps.timed("boot"):
        clock.now += 4.0
        raise RuntimeError("boom")
    assert laps.as_dict() == {"boot": 4.0}


def test_sweep_log_appends_whole_lines_and_skips_a_torn_one(tmp_path: Path) -> None:
    folder = tmp_path / "exp"
    append_sweep_record(folder, {"id": "a", "side": "runner", "runs": 70.5})
    append_sweep_record(folder, {"id": "a", "side": "vm_host", "boot": 4.2})
    with open(folder / SWEEP_LOG, "a") as f:
        f.write('{"id": "b", "side": "run')  # a writer killed mid-line
    records = read_sweep_records(folder)
    assert records == [{"id": "a", "side": "runner", "runs": 70.5}, {"id": "a", "side": "vm_host", "boot": 4.2}]
    assert all(json.loads(line) for line in (folder / SWEEP_LOG).read_text().splitlines()[:2])
    assert read_sweep_records(tmp_path / "none") == []


def test_process_age_counts_from_the_process_start() -> None:
    code = ("import time; time.sleep(1.2); from nest_experiments.runs.phases import process_age_s; "
            "print(process_age_s())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert 1.19 <= float(out) < 30.0  # slept 1.2 s (clock ticks: 10 ms), plus the interpreter's start
