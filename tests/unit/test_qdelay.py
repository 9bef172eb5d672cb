"""Capture-based queue delay: the matcher on synthetic pcaps written with dpkt (no root)."""

from __future__ import annotations

import csv
import json
import socket
from pathlib import Path

import dpkt
import pytest

from nest_experiments.analysis import qdelay
from nest_experiments.collectors.capture import (
    EgressTarget,
    Tap,
    match_captures,
    parse_tcpdump_stats,
    plan_taps,
    read_records,
    run_clock_offset,
    tcpdump_argv,
)

H1, S1, H2, S2 = "10.0.0.1", "10.0.1.1", "10.0.0.2", "10.0.2.1"
REALTIME_AT_T0 = 1000.0  # CLOCK_REALTIME at t = 0 (small: dpkt's writer takes a float)


def frame(src: str, dst: str, ip_id: int, seq: int, *, ttl: int = 64, tos: int = 0, proto: str = "tcp") -> bytes:
    l4: dpkt.Packet = (dpkt.tcp.TCP(sport=40000, dport=5201, seq=seq, flags=dpkt.tcp.TH_ACK, data=b"x" * 1448)
                       if proto == "tcp" else dpkt.udp.UDP(sport=5060, dport=5060, data=b"y" * 200))
    ip = dpkt.ip.IP(src=socket.inet_aton(src), dst=socket.inet_aton(dst), id=ip_id, ttl=ttl, tos=tos,
                    p=dpkt.ip.IP_PROTO_TCP if proto == "tcp" else dpkt.ip.IP_PROTO_UDP, data=l4)
    eth = dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
    return bytes(eth)[:96]  # tcpdump -s 96


def write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> None:
    with path.open("wb") as fh:
        w = dpkt.pcap.Writer(fh, snaplen=96, nano=True)
        for t, buf in packets:
            w.writepkt(buf, ts=REALTIME_AT_T0 + t)


def forwarded(buf: bytes, *, ecn: bool = False) -> bytes:
    """What leaves the router: TTL one less, new checksum, maybe ECN-marked."""
    eth = dpkt.ethernet.Ethernet(buf)
    ip = eth.data
    ip.ttl -= 1
    ip.sum = 0
    if ecn:
        ip.tos |= 0x03
    return bytes(eth)[:96]


# A small scenario through r1: h1 -> s1 data, one dropped, one retransmitted, one IP ID reused
# after a drop, plus a flow r1 routes elsewhere (h2 -> s2).
A = frame(H1, S1, 100, 1000)
B = frame(H1, S1, 101, 2448)  # dropped by the qdisc
C = frame(H1, S1, 102, 3896)
B_RETX = frame(H1, S1, 103, 2448)  # the retransmission of B: same seq, new IP ID
D_OLD = frame(H1, S1, 7, 9000)  # dropped ...
D_NEW = frame(H1, S1, 7, 9000)  # ... same key again (IP ID wrapped): forwarded
OTHER = frame(H2, S2, 5, 1)
UDP = frame(H1, S1, 200, 0, proto="udp")

INGRESS = [(0.100, A), (0.101, B), (0.102, C), (0.103, OTHER), (0.200, B_RETX), (0.300, D_OLD), (0.400, D_NEW),
           (0.500, UDP)]
EGRESS = [(0.105, forwarded(A)), (0.110, forwarded(C, ecn=True)), (0.230, forwarded(B_RETX)),
          (0.402, forwarded(D_NEW)), (0.503, forwarded(UDP))]


def records(packets: list[tuple[float, bytes]]) -> list[qdelay.Record]:
    out = [qdelay.frame_record(t, buf, qdelay.LINKTYPE_ETHERNET) for t, buf in packets]
    return [r for r in out if r is not None]


def test_key_ignores_ttl_checksum_and_ecn_but_not_seq_or_id() -> None:
    key = records([(0.0, A)])[0][1]
    assert records([(0.0, forwarded(A, ecn=True))])[0][1] == key
    assert records([(0.0, frame(H1, S1, 100, 1001))])[0][1] != key
    assert records([(0.0, frame(H1, S1, 101, 1000))])[0][1] != key


def test_non_ipv4_frames_are_skipped() -> None:
    arp = bytes(dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_ARP, data=b"\x00" * 28))
    assert qdelay.frame_record(0.0, arp, qdelay.LINKTYPE_ETHERNET) is None


def test_matching_handles_drops_retransmissions_and_reused_keys() -> None:
    m = qdelay.match_packets(records(INGRESS), records(EGRESS))
    assert m.egress_packets == 5 and m.matched == 5 and m.unmatched_egress == 0
    assert m.matched_fraction == 1.0
    assert m.unmatched_ingress == 2  # B and D_OLD: what the qdisc dropped
    assert m.other_ingress == 1  # h2 -> s2 went out another interface
    assert m.ingress_packets == 7
    delays_ms = [round(d * 1e3, 6) for d in m.delays_s()]
    assert delays_ms == [5.0, 8.0, 30.0, 2.0, 3.0]  # D_NEW matched to the newer copy: 2 ms, not 102 ms


def test_egress_without_ingress_is_unmatched() -> None:
    m = qdelay.match_packets(records([(0.2, A)]), records([(0.1, forwarded(A))]))  # left before it arrived
    assert m.matched == 0 and m.unmatched_egress == 1 and m.unmatched_ingress == 1


def test_pie_style_is_zero_when_the_queue_empties() -> None:
    # three packets queued back to back, then an idle gap, then one packet alone
    t_in = [0.0, 0.001, 0.002, 1.0]
    t_out = [0.010, 0.011, 0.012, 1.001]
    values = qdelay.pie_style_values(t_out, t_in)
    assert values == pytest.approx([0.010, 0.010, 0.0, 0.0])
    assert qdelay.sample_step(t_out, values, [0.005, 0.0105, 0.5, 2.0]) == pytest.approx([0.0, 0.010, 0.0, 0.0])


def test_percentile_matches_linear_interpolation() -> None:
    assert qdelay.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert qdelay.percentile([5.0], 95) == 5.0


def test_pcaps_read_back_on_the_run_clock(tmp_path: Path) -> None:
    write_pcap(tmp_path / "x.pcap", INGRESS)
    meta = {"t0_monotonic": 50.0, "clock_pairs": [{"monotonic": 40.0, "realtime": REALTIME_AT_T0 - 10.0}]}
    offset, drift = run_clock_offset(meta)
    got = list(read_records(tmp_path / "x.pcap", offset))
    assert drift == 0.0
    assert [round(r[0], 9) for r in got] == [t for t, _ in INGRESS]


def test_taps_and_tcpdump_arguments() -> None:
    target = EgressTarget(link="bottleneck", node="r1", ns="nx1-r1", dev="r1-r2", ingress_devs=("r1-h1", "r1-h2"))
    taps = plan_taps([target, target])
    assert [(t.dev, t.direction) for t in taps] == [("r1-r2", "out"), ("r1-h1", "in"), ("r1-h2", "in")]
    argv = tcpdump_argv(Tap(node="r1", ns="ns", dev="r1-r2", direction="out"), Path("/tmp/x.pcap"))
    assert argv[:6] == ["tcpdump", "-n", "-i", "r1-r2", "-Q", "out"]
    assert "--time-stamp-precision=nano" in argv and argv[argv.index("-s") + 1] == "96"


def test_tcpdump_closing_stats() -> None:
    text = "tcpdump: listening on r1-r2\n1200 packets captured\n1210 packets received by filter\n3 packets dropped by kernel\n"
    assert parse_tcpdump_stats(text) == {"captured": 1200, "received_by_filter": 1210, "dropped_by_kernel": 3}


def make_run(tmp_path: Path, *, keep: bool = False) -> Path:
    run = tmp_path / "run"
    cap = run / "captures"
    cap.mkdir(parents=True)
    write_pcap(cap / "r1-r1-h1-in.pcap", INGRESS)
    write_pcap(cap / "r1-r1-r2-out.pcap", EGRESS)
    meta = {"t0_monotonic": 100.0, "clock_pairs": [{"monotonic": 100.0, "realtime": REALTIME_AT_T0}], "keep": keep,
            "targets": [{"link": "bottleneck", "node": "r1", "ns": "x", "dev": "r1-r2", "ingress_devs": ["r1-h1"]}],
            "tcpdump_stats": {"r1-r1-r2-out.pcap": {"captured": 5, "dropped_by_kernel": 0}}, "bytes": 1000}
    (cap / "capture.json").write_text(json.dumps(meta))
    (run / "links.json").write_text(json.dumps({"egresses": [
        {"link": "bottleneck", "node": "r1", "dev": "r1-r2", "leaf_handle": "2:", "qdisc": "pie"}]}))
    with (run / "qdisc.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "node", "dev", "handle", "drops", "delay_ms"])
        w.writerow([0.0, "r1", "r1-r2", "1:", 0, ""])
        for t, drops, delay in [(0.0, 0, 0.0), (0.106, 1, 5.0), (0.25, 2, 0.0), (0.45, 2, 0.0)]:
            w.writerow([t, "r1", "r1-r2", "2:", drops, delay])
    (run / "manifest.json").write_text(json.dumps({"status": "completed", "traffic_start_t": -2.0,
                                                   "traffic_end_t": 2.0, "warnings": []}))
    return run


def test_match_captures_writes_qdelay_csv_and_summary(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    manifest: dict = {}
    warnings = match_captures(run, manifest)
    assert warnings == []
    rows = list(csv.DictReader((run / "qdelay.csv").open()))
    per_packet = [r for r in rows if r["method"] == "capture-per-packet"]
    assert [float(r["delay_ms"]) for r in per_packet] == [5.0, 8.0, 30.0, 2.0, 3.0]
    assert [float(r["t"]) for r in per_packet] == [0.105, 0.11, 0.23, 0.402, 0.503]
    assert {r["node"] for r in rows} == {"r1"} and {r["dev"] for r in rows} == {"r1-r2"}
    pie = [float(r["delay_ms"]) for r in rows if r["method"] == "capture-pie-style"]
    assert pie == [0.0, 5.0, 0.0, 0.0]  # at the sampler's instants: A (C still queued), then empty
    (s,) = json.loads((run / "qdelay_summary.json").read_text())["egresses"]
    assert s["matched_fraction"] == 1.0 and s["unmatched_ingress"] == 2 and s["qdisc_drops"] == 2
    assert s["mean_per_packet_ms"] == pytest.approx(9.6)
    assert s["kernel_mean_delay_ms"] == pytest.approx(1.25) and s["mean_pie_style_ms"] == pytest.approx(1.25)
    assert s["ratio_pie_style_to_kernel"] == pytest.approx(1.0)
    assert manifest["qdelay"]["egresses"]["r1/r1-r2"]["unmatched_ingress"] == 2
    assert not (run / "captures").exists()  # pcaps deleted once matched


def test_keep_captures_keeps_the_pcaps(tmp_path: Path) -> None:
    run = make_run(tmp_path, keep=True)
    match_captures(run, {})
    assert (run / "captures" / "r1-r1-r2-out.pcap").exists() and (run / "qdelay.csv").exists()


def test_a_broken_capture_is_a_warning_not_a_lost_run(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / "captures" / "r1-r1-r2-out.pcap").write_bytes(b"not a pcap")
    manifest: dict = {}
    warnings = match_captures(run, manifest)
    assert len(warnings) == 1 and "matching the captures failed" in warnings[0]
    assert (run / "captures").exists() and "qdelay" not in manifest


def test_no_captures_nothing_to_do(tmp_path: Path) -> None:
    assert match_captures(tmp_path, {}) == []


# ---------------------------------------------------------------- experiment.qdelay_links

def _exp(**experiment: object) -> dict:
    return {"experiment": {"name": "q", "duration": "5s", **experiment},
            "links": {"bottleneck": {"rate": "10mbit", "forward": {"qdisc": {"kind": "fq_pie", "target": "5ms"}}}}}


def test_qdelay_links_default_none_and_accepted() -> None:
    from nest_experiments.config import parse_experiment

    assert parse_experiment(_exp()).qdelay_links == ()
    exp = parse_experiment(_exp(qdelay_links=["bottleneck"], keep_captures=True))
    assert exp.qdelay_links == ("bottleneck",) and exp.keep_captures


@pytest.mark.parametrize(("value", "message"), [
    (["nope"], "experiment.qdelay_links[0]"),
    (["h1_r1"], "a host"),  # h1 -> r1: nothing is forwarded at h1
    (["r2_s1"], "no qdisc on its forward egress"),
    ("bottleneck", "expected a list"),
    (["bottleneck", "bottleneck"], "twice"),
])
def test_qdelay_links_errors_name_the_key(value: object, message: str) -> None:
    from nest_experiments.config import parse_experiment
    from nest_experiments.errors import ConfigError

    with pytest.raises(ConfigError, match=r"experiment\.qdelay_links") as err:
        parse_experiment(_exp(qdelay_links=value))
    assert message in str(err.value)
