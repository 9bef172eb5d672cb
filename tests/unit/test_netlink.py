"""HTB class changes as netlink messages (:mod:`nest_experiments.net.netlink`), without a kernel."""

from __future__ import annotations

import pytest

from nest_experiments.net import netlink as H
from nest_experiments.net.netlink import netlink_messages


def decode(msg: bytes) -> tuple[int, H.HtbClass | None]:
    ((kind, seq, payload),) = list(netlink_messages(msg))
    assert seq == 7
    return kind, H.htb_class(payload)


def test_a_change_is_an_rtm_newtclass_with_rate_ceil_burst_and_quantum_as_tc_sets_them() -> None:
    kind, cls = decode(H.change_request(index=3, classid="2:1", parent="2:", rate_bps=10_000_000, seq=7))
    assert kind == H.RTM_NEWTCLASS and cls is not None
    assert (cls.index, cls.classid, cls.rate_bps, cls.ceil_bps) == (3, 0x00020001, 10_000_000, 10_000_000)
    # tc: burst = one 1600-byte MTU at the rate = 1280 us = 20000 ticks of 64 ns; quantum = 1250000 / r2q, capped
    assert (cls.buffer_ticks, cls.cbuffer_ticks, cls.quantum) == (20_000, 20_000, 125_000)


def test_slow_rates_get_the_kernels_least_quantum_and_whole_bytes() -> None:
    _, cls = decode(H.change_request(index=1, classid="1:1", parent="1:", rate_bps=64_007, seq=7))
    assert cls is not None and cls.rate_bps == 64_000 and cls.quantum == 1000
    assert cls.buffer_ticks == int(int(1e6 * 1600 / 8000) * 1000 / 64)  # 200 ms
    with pytest.raises(ValueError, match="at least 8 bit/s"):
        H.change_request(index=1, classid="1:1", parent="1:", rate_bps=7, seq=1)


def test_rates_beyond_32_bits_of_bytes_go_in_rate64() -> None:
    _, cls = decode(H.change_request(index=1, classid="1:1", parent="1:", rate_bps=40 * 10**9, seq=7))
    assert cls is not None and cls.rate_bps == cls.ceil_bps == 40 * 10**9


def test_handles_are_tcs_hexadecimal_major_minor() -> None:
    assert H.parse_handle("1:") == 0x10000 and H.parse_handle("a:1f") == 0xA001F
    assert [H.format_handle(H.parse_handle(t)) for t in ("1:1", "2:", "a:1f")] == ["1:1", "2:", "a:1f"]
