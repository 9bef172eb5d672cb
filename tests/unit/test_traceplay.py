"""TracePlayer with a fake in place of HtbRates and a clock the test moves: a late wake applies only the newest rate."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nest_experiments.errors import NetworkSetupError, RunError
from nest_experiments.net.netlink import HtbClass
from nest_experiments.net.tcplan import Egress, EgressPlan
from nest_experiments.rundir import read_csv
from nest_experiments.runs.traceplay import Change, TracePlayer


def egress(node: str) -> Egress:
    plan = EgressPlan(ns=f"nx-{node}", dev="eth1", commands=(), qdiscs=(), htb_rate_bps=1, htb_class="1:1",
                      leaf_handle="10:")
    return Egress(link="bottleneck", node=node, peer="x", dev="eth1", ns=f"nx-{node}", plan=plan)


class FakeRates:
    """Records every rate set; reads back the last one, as the kernel would (rounded to bytes/s)."""

    def __init__(self, egresses: list[Egress], *, refuse: int | None = None) -> None:
        self.egresses = egresses
        self.refuse = refuse
        self.calls: list[tuple[str, int]] = []
        self.closed = False

    def set(self, egress: Egress, rate_bps: int) -> None:
        if rate_bps == self.refuse:
            raise NetworkSetupError(f"{egress.node}: class change refused: Invalid argument")
        self.calls.append((egress.node, rate_bps))

    def read(self, egress: Egress) -> HtbClass:
        rate = [r for node, r in self.calls if node == egress.node][-1] // 8 * 8
        return HtbClass(index=1, classid=0x10001, rate_bps=rate, ceil_bps=rate, buffer_ticks=0, cbuffer_ticks=0,
                        quantum=0)

    def close(self) -> None:
        self.closed = True


def wait_for(cond: Callable[[], bool], timeout_s: float = 2.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "the player did not get there"
        time.sleep(0.002)


A, B = egress("r1"), egress("r2")
CHANGES = [Change(0.0, A, "forward", 2_000_000), Change(0.0, B, "reverse", 1_000_000),
           Change(0.01, A, "forward", 1_000_000), Change(0.02, A, "forward", 3_000_000),
           Change(0.025, B, "reverse", 700_000), Change(0.03, A, "forward", 500_000),
           Change(0.06, A, "forward", 4_000_000)]


def test_a_late_wake_applies_only_the_newest_due_rate_per_egress(tmp_path: Path) -> None:
    now = [0.05]  # the player wakes at 50 ms: four changes of two egresses are due
    fakes: list[FakeRates] = []
    player = TracePlayer(CHANGES, tmp_path / "rates.csv", clock=lambda: now[0],
                         rates=lambda egs: fakes.append(FakeRates(egs)) or fakes[-1])
    player.open()
    player.start()
    (fake,) = fakes
    wait_for(lambda: player.summary()["changes_applied"] == 2)  # set and recorded
    assert fake.calls == [("r1", 500_000), ("r2", 700_000)]  # not 1 and 3 Mbit/s on the way
    assert player.skipped == 2
    now[0] = 0.07
    wait_for(lambda: player.summary()["changes_applied"] == 3)  # the player slept until 60 ms by the clock it read (10 ms)
    player.stop()
    assert fake.calls[-1] == ("r1", 4_000_000) and fake.closed
    rows = [(float(r["t"]), float(r["t_scheduled"]), r["node"], int(r["rate_bps"]))
            for r in read_csv(tmp_path / "rates.csv")]
    assert rows == [(0.0, 0.0, "r1", 2_000_000), (0.0, 0.0, "r2", 1_000_000), (0.05, 0.03, "r1", 500_000),
                    (0.05, 0.025, "r2", 700_000), (0.07, 0.06, "r1", 4_000_000)]
    summary = player.summary()
    assert summary["changes_applied"] == 3 and summary["changes_skipped"] == 2
    assert summary["late_ms_max"] == pytest.approx(25.0)
    (warning,) = player.warnings()
    assert "2 skipped" in warning


def test_a_refused_change_stops_the_player_and_is_raised_by_stop(tmp_path: Path) -> None:
    fakes: list[FakeRates] = []
    player = TracePlayer(CHANGES, tmp_path / "rates.csv", clock=lambda: 0.05,
                         rates=lambda egs: fakes.append(FakeRates(egs, refuse=500_000)) or fakes[-1])
    player.open()
    player.start()
    wait_for(lambda: player.error is not None)
    with pytest.raises(RunError, match="trace player: r1: class change refused"):
        player.stop()
    assert fakes[0].closed and fakes[0].calls == []
