"""Changing the rate of a planned egress (:func:`tcplan.plan_rate_change`)."""

from __future__ import annotations

import pytest

from nest_experiments.config import EgressConfig, QdiscConfig
from nest_experiments.errors import ConfigError
from nest_experiments.net.tcplan import compare_rate, plan_egress, plan_rate_change

FIFO = QdiscConfig(kind="pfifo", params=(("limit", 1000),))


def test_rate_change_is_a_class_change_of_the_htb_class() -> None:
    plan = plan_egress("ns", "r2", EgressConfig(rate_bps=5_000_000, qdisc=FIFO))
    after, argv = plan_rate_change(plan, 1_000_000)
    assert " ".join(argv) == "tc -n ns class change dev r2 parent 1: classid 1:1 htb rate 1mbit ceil 1mbit"
    assert after.htb_rate_bps == 1_000_000 and after.qdiscs == plan.qdiscs
    assert compare_rate(after, {"1:1": 1_000_000}) == [] and compare_rate(after, {"1:1": 5_000_000}) != []


def test_the_plan_afterwards_builds_the_new_rate() -> None:
    plan = plan_egress("ns", "d", EgressConfig(rate_bps=5_000_000, delay_s=0.01, qdisc=FIFO))
    after, argv = plan_rate_change(plan, 250_000)
    assert argv[-9:] == ("parent", "2:", "classid", "2:1", "htb", "rate", "250kbit", "ceil", "250kbit")
    fresh = plan_egress("ns", "d", EgressConfig(rate_bps=250_000, delay_s=0.01, qdisc=FIFO))
    assert after == fresh


def test_no_rate_or_a_bad_rate_is_refused() -> None:
    with pytest.raises(ConfigError, match="no rate"):
        plan_rate_change(plan_egress("ns", "d", EgressConfig(delay_s=0.01)), 1_000_000)
    with pytest.raises(ConfigError, match="> 0"):
        plan_rate_change(plan_egress("ns", "d", EgressConfig(rate_bps=10**6, qdisc=FIFO)), 0)
