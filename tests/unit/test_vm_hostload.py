"""The host's steal and qemu's CPU per run (vm.hostload): parsing, windows, the manifest's figures."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nest_experiments.collectors.cpu import CLK_TCK, ProcReading
from nest_experiments.vm.hostload import HostLoad, HostSample, annotate, read_sample, window

T0 = datetime(2026, 11, 22, 8, 0, 0, tzinfo=UTC)


def _samples(steal_per_s: int, total_per_s: int, qemu_per_s: int, n: int = 11) -> list[HostSample]:
    t = T0.timestamp()
    return [HostSample(wall=t + i, steal=1000 + i * steal_per_s, total=50_000 + i * total_per_s,
                       qemu_s=(7 + i * qemu_per_s) / CLK_TCK) for i in range(n)]


def test_read_sample_parses_proc(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 2 30 400 5 0 6 70 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    (tmp_path / "42").mkdir()
    # a command name with spaces and a ")" in it: fields are counted from the last ")"
    (tmp_path / "42" / "stat").write_text("42 (qemu (x) y) S 1 42 42 0 -1 4194560 10 0 0 0 123 45 6 7 20 0\n")
    s = read_sample(42, proc=tmp_path)
    assert s is not None and (s.steal, s.total) == (70, 613) and s.qemu_s == pytest.approx(168 / CLK_TCK)
    assert read_sample(43, proc=tmp_path) is None  # gone
    assert s.threads == ()  # no task folder: no threads
    for tid, name in ((42, "qemu-system-x86"), (44, "CPU 0/TCG")):
        (tmp_path / "42" / "task" / str(tid)).mkdir(parents=True)
        (tmp_path / "42" / "task" / str(tid) / "stat").write_text(
            f"{tid} ({name}) R 1 42 42 0 -1 4194560 10 0 0 0 {tid} 1 6 7 20 0 3 0 555 0\n")
    threads = dict((read_sample(42, proc=tmp_path) or s).threads)
    assert {k: (r.comm, r.reaped_s) for k, r in threads.items()} == {(42, 555): ("qemu-system-x86", 0.0),
                                                                     (44, 555): ("CPU 0/TCG", 0.0)}
    assert threads[(44, 555)].cpu_s == pytest.approx(45 / CLK_TCK)


def test_window_steal_and_qemu_cpus() -> None:
    samples = _samples(steal_per_s=20, total_per_s=200, qemu_per_s=int(1.5 * CLK_TCK))
    w = window(samples, T0.timestamp() + 2, T0.timestamp() + 8)
    assert w == {"host_steal": 0.1, "host_qemu_cpus": 1.5}
    assert window(samples, T0.timestamp() + 100, T0.timestamp() + 200) is None  # no samples in the run
    assert window(samples[:1], T0.timestamp(), T0.timestamp() + 10) is None


def test_annotate_adds_figures_and_warns_above_five_percent() -> None:
    m = {"t0_wall": T0.isoformat(), "duration_s": 5.0, "traffic_end_t": 6.0, "warnings": ["earlier"]}
    assert annotate(m, _samples(steal_per_s=20, total_per_s=200, qemu_per_s=CLK_TCK))
    assert m["host_steal"] == 0.1 and m["host_qemu_cpus"] == 1.0
    assert m["warnings"][0] == "earlier" and "took 10% of its CPU time" in m["warnings"][1]
    quiet = {"t0_wall": T0.isoformat(), "duration_s": 5.0}
    assert annotate(quiet, _samples(steal_per_s=1, total_per_s=200, qemu_per_s=CLK_TCK))
    assert quiet["host_steal"] == 0.005 and "warnings" not in quiet
    assert not annotate({"duration_s": 5.0}, _samples(1, 200, 1))  # no start time: nothing to match
    assert not annotate({"t0_wall": "yesterday", "duration_s": 5.0}, _samples(1, 200, 1))


def test_host_load_samples_a_live_process() -> None:
    load = HostLoad(os.getpid(), interval_s=0.05).start()
    end = datetime.now().timestamp() + 1.0  # 0.3 s gave the sampler only 2 turns twice in session 13 (a busy test run)
    while datetime.now().timestamp() < end:  # burn some CPU for it to see
        sum(range(10_000))
    samples = load.stop()
    assert len(samples) >= 3
    assert samples[-1].qemu_s > samples[0].qemu_s and samples[-1].total > samples[0].total
    assert HostLoad(2**22 + 12345, interval_s=0.01).start().stop() == []  # no such process: no samples


def test_annotate_adds_the_qemu_thread_rule() -> None:
    t0 = 1_800_000_000.0
    tick = 1 / CLK_TCK

    def sample(i: int) -> HostSample:
        vcpu = ProcReading(comm="CPU 0/TCG", ppid=1, cpu_s=round(i * 0.99 * CLK_TCK) * tick)
        io = ProcReading(comm="qemu-system-x86", ppid=1, cpu_s=round(i * 0.1 * CLK_TCK) * tick)
        return HostSample(wall=t0 + i, steal=0, total=1000 * i, qemu_s=i * 1.1, threads=(((900, 1), vcpu), ((901, 1), io)))

    m: dict[str, object] = {"t0_wall": datetime.fromtimestamp(t0, UTC).isoformat(), "duration_s": 4.0,
                            "warnings": []}
    assert annotate(m, [sample(i) for i in range(6)])
    cpu = m["cpu"]
    assert isinstance(cpu, dict) and cpu["saturated_by"] == {"qemu_thread": 4} and cpu["saturated_windows"] == 4
    assert [(r["comm"], r["tid"]) for r in cpu["qemu_threads"]] == [("CPU 0/TCG", 900)]
    assert m["warnings"] == ["CPU saturated by a thread of qemu on the host (>= 95% of one CPU) in 4 of 4 1 s windows: "
                             "CPU 0/TCG (tid 900, 4 s saturated, peak 99%): the emulation, not the network, may have "
                             "shaped the result"]
