from __future__ import annotations

import pytest

from nest_experiments.errors import ConfigError
from nest_experiments.units import format_rate, format_time, parse_percent, parse_rate, parse_size, parse_time


@pytest.mark.parametrize(("text", "bps"), [("10mbit", 10**7), ("1.5Mbit", 1_500_000), ("500kbit", 500_000),
                                           ("1gbit", 10**9), ("64bit", 64)])
def test_rates(text: str, bps: int) -> None:
    assert parse_rate("k", text) == bps


@pytest.mark.parametrize("text", ["10mbps", "10", "fast", "0mbit", "-1mbit", True])
def test_bad_rates(text: object) -> None:
    with pytest.raises(ConfigError, match="^k:"):
        parse_rate("k", text)


def test_bytes_per_second_units_are_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="bytes/s"):
        parse_rate("k", "10mbps")


@pytest.mark.parametrize(("text", "s"), [("5ms", 0.005), ("10s", 10.0), ("100us", 1e-4), ("2min", 120.0), ("3h", 10800.0)])
def test_times(text: str, s: float) -> None:
    assert parse_time("k", text) == pytest.approx(s)


def test_time_needs_a_unit_and_can_forbid_zero() -> None:
    with pytest.raises(ConfigError, match="needs a unit"):
        parse_time("k", "5")
    with pytest.raises(ConfigError, match="greater than zero"):
        parse_time("k", "0s", allow_zero=False)


def test_sizes_and_percent() -> None:
    assert parse_size("k", "64kb") == 65536
    assert parse_size("k", 1500) == 1500
    assert parse_percent("k", "1.5%") == 1.5
    with pytest.raises(ConfigError):
        parse_percent("k", "150%")


def test_formatting_round_trips() -> None:
    assert format_time(0.005) == "5ms" and format_time(2.0) == "2s" and format_time(0.0001) == "100us"
    assert format_rate(10**7) == "10mbit" and format_rate(1500) == "1500bit"
