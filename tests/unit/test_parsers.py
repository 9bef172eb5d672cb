from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from nest_experiments.errors import RunError
from nest_experiments.parsers import iperf3
from nest_experiments.parsers.netstat import group_counters
from nest_experiments.parsers.tcstats import PIE_MAX_PROB, delay_and_prob, ecn_marks, qdisc_row, xstats_bytes

DATA = Path(__file__).resolve().parents[1] / "data"


def test_iperf3_json_from_a_real_run() -> None:
    data = iperf3.load((DATA / "iperf3_5flows.json").read_text(), what="t")
    rows = iperf3.interval_rows(data, flow_prefix="bulk", src="h1", dst="s1", t_offset=10.0)
    summary = iperf3.summary_rows(data, flow_prefix="bulk", src="h1", dst="s1")
    assert {r["flow"] for r in rows} == {f"bulk.{i}" for i in range(5)}
    assert min(r["t"] for r in rows) > 10.0
    assert len(summary) == 5 and all(s["bytes"] > 0 for s in summary)
    total = sum(s["receiver_bits_per_second"] for s in summary)
    assert total == pytest.approx(json.loads((DATA / "iperf3_5flows.json").read_text())["end"]["sum_received"]
                                  ["bits_per_second"], rel=0.01)


def test_iperf3_errors_become_run_errors() -> None:
    with pytest.raises(RunError, match="unable to connect"):
        iperf3.load('{"error": "unable to connect to server"}', what="t")
    with pytest.raises(RunError, match="no JSON"):
        iperf3.load("iperf3: error", what="t")


def test_pie_xstats_are_decoded() -> None:
    raw = struct.pack("=QIIIIIIII", PIE_MAX_PROB // 4, 5460, 0, 0, 100, 7, 0, 0, 0)
    delay, prob = delay_and_prob(raw)
    assert delay == pytest.approx(5.46) and prob == pytest.approx(0.25)
    assert xstats_bytes(raw.hex(":")) == raw
    row = qdisc_row("pie", {"backlog": 3000, "qlen": 2, "drop": 7, "packets": 10, "bytes": 15000}, raw)
    assert row["delay_ms"] == 5.46 and row["drops"] == 7 and row["backlog_pkts"] == 2
    assert qdisc_row("pfifo", {}, None)["delay_ms"] == ""
    # CoDel's ldelay (us) is its delay too; FQ-PIE's xstats carry none (qdisc/kinds.toml's xstats tables)
    codel = struct.pack("=IIIIiIIII", 1514, 3, 2, 4250, -1, 0, 55, 1, 66)
    assert delay_and_prob(codel, "codel") == (4.25, None) and qdisc_row("codel", {}, codel)["prob"] == ""
    assert delay_and_prob(struct.pack("=9I", *range(9)), "fq_pie") == (None, None)


def test_ecn_marks_are_read_from_each_aqms_xstats() -> None:
    # the kernel's structs (linux/pkt_sched.h); each value distinct, so a wrong index reads a wrong number
    pie = struct.pack("=QIIIIIIII", 0, 5000, 1, 0, 900, 7, 0, 40, 33)  # ..., maxq, ecn_mark
    fq_pie = struct.pack("=9I", 900, 7, 2, 0, 44, 5, 1, 2, 4096)  # packets_in, dropped, overlimit, overmemory, ecn_mark
    codel = struct.pack("=IIIIiIIII", 1514, 3, 2, 5000, -1, 0, 55, 1, 66)  # ..., drop_overlimit, ecn_mark, dropping, ce
    fq_codel = struct.pack("=I6I", 0, 1514, 2, 77, 9, 1, 1)  # type 0 (qdisc), maxpacket, drop_overlimit, ecn_mark
    assert [ecn_marks(k, raw) for k, raw in (("pie", pie), ("fq_pie", fq_pie), ("codel", codel),
                                               ("fq_codel", fq_codel))] == [33, 44, 55, 77]
    assert ecn_marks("fq_codel", struct.pack("=I6I", 1, 0, 0, 77, 0, 0, 0)) is None  # class stats, not the qdisc's
    assert ecn_marks("pie", pie[:-4]) is None and ecn_marks("pfifo", pie) is None  # short, or no counter
    assert qdisc_row("fq_pie", {}, fq_pie.hex(":"))["ecn_marks"] == 44 and qdisc_row("pfifo", {}, None)["ecn_marks"] == ""


NETSTAT = """TcpExt: SyncookiesSent SyncookiesRecv
TcpExt: 0 3
MPTcpExt: MPCapableSYNRX MPJoinSynRx AddAddr EchoAdd
MPTcpExt: 1 2 0 1
"""


def test_netstat_group_counters() -> None:
    assert group_counters(NETSTAT, "MPTcpExt") == {"MPCapableSYNRX": 1, "MPJoinSynRx": 2, "AddAddr": 0, "EchoAdd": 1}
    assert group_counters(NETSTAT, "TcpExt") == {"SyncookiesSent": 0, "SyncookiesRecv": 3}
    assert group_counters(NETSTAT, "IpExt") == {}  # a kernel without the group
    with pytest.raises(ValueError, match="MPTcpExt has 4 names and 3 values"):
        group_counters(NETSTAT.replace("1 2 0 1", "1 2 0"), "MPTcpExt")


def test_netstat_of_this_kernel() -> None:
    counters = group_counters(Path("/proc/net/netstat").read_text(), "TcpExt")
    assert "TCPTimeouts" in counters and all(v >= 0 for v in counters.values())
