"""runner.finish_grace_s: the time apps get after the run's duration grows with the slowest full queue then."""

from __future__ import annotations

from typing import Any

import pytest

from nest_experiments.config import parse_experiment
from nest_experiments.runs.runner import FINISH_GRACE_S, MAX_QUEUE_GRACE_S, PACKET_BITS, QUEUE_CROSSINGS, finish_grace_s

REVERSE_S = 1000 * PACKET_BITS / 10e6  # the dumbbell's reverse bottleneck: 10 Mbit/s, a 1000-packet pfifo


def expected(forward_queue_s: float) -> float:
    return FINISH_GRACE_S + QUEUE_CROSSINGS * max(forward_queue_s, REVERSE_S)


def grace(forward: dict[str, Any], *, duration: str = "60s", vm: bool = False) -> float:
    exp = parse_experiment({"experiment": {"name": "g", "topology": "dumbbell", "duration": duration},
                            "links": {"bottleneck": {"forward": forward}}})
    return finish_grace_s(exp, vm=vm)


def test_a_fast_link_keeps_the_base_grace() -> None:
    exp = parse_experiment({"experiment": {"name": "g", "topology": "dumbbell", "duration": "60s"},
                            "links": {"bottleneck": {"rate": "10mbit", "qdisc": {"kind": "pie", "target": "5ms"}}}})
    assert finish_grace_s(exp, vm=False) == pytest.approx(FINISH_GRACE_S + QUEUE_CROSSINGS * (0.005 + 10 * PACKET_BITS / 10e6))
    assert finish_grace_s(exp, vm=True) == pytest.approx(FINISH_GRACE_S + 60 + QUEUE_CROSSINGS * (0.005 + 0.01211))
    assert grace({"rate": "100mbit"}) == pytest.approx(expected(0.0))  # the reverse's 1.2 s queue is the longest


def test_a_fifo_at_a_low_rate_gets_the_time_its_full_queue_takes_to_drain_per_crossing() -> None:
    # the bench's DVL at its real rates: 480 s compressed into 60 s, back at 64 kbit/s when the run ends
    dvl = {"trace": {"generator": "dvl", "time_scale": 0.125}, "qdisc": {"kind": "pfifo", "limit": 20}}
    assert grace(dvl) == pytest.approx(expected(20 * PACKET_BITS / 64_000))  # 30.1 s
    # at 30 s DVL is at 256 kbit/s until 37.5 s, then 192: the lowest rate in the next 15 s counts
    assert grace(dvl, duration="30s") == pytest.approx(expected(20 * PACKET_BITS / 192_000))
    assert grace({"rate": "100kbit", "qdisc": {"kind": "bfifo", "limit": "30kb"}}) == pytest.approx(expected(30 * 1024 * 8 / 1e5))  # kb: 1024 bytes, as tc


def test_the_queue_allowance_is_capped() -> None:
    # HTB's own 1000-packet leaf at 64 kbit/s would be 190 s per crossing
    assert grace({"rate": "64kbit"}) == FINISH_GRACE_S + MAX_QUEUE_GRACE_S
