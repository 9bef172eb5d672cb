"""The router runtime's pure parts: which links go through the guest, its slots and qemu arguments, the clock
offset, the guest's load, the captures of a routed link, and the collectors' requests to a fake guest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nest_experiments.collectors.capture import plan_taps, plan_targets
from nest_experiments.collectors.cpu import add_guest_rule
from nest_experiments.collectors.qdisc import QdiscSampler
from nest_experiments.config.sweep import expand
from nest_experiments.errors import ConfigError, KernelFeatureError, VMError
from nest_experiments.net import kernel, routed
from nest_experiments.net.tcplan import Egress, plan_egress
from nest_experiments.runs import runtime
from nest_experiments.runs.runner import guest_busy, guest_shares
from nest_experiments.vm.router import best_offset, plan_slots, qemu_devices

RAW = {"experiment": {"name": "rt", "topology": "dumbbell", "duration": "5s", "qdelay_links": ["bottleneck"]},
       "links": {"bottleneck": {"rate": "10mbit", "forward": {"qdisc": {"kind": "pie"}},
                                "reverse": {"delay": "20ms"}}}}


def _exp() -> Any:
    return expand(RAW)[0].experiment


def _plan(missing: set[str], slots: int = 2) -> list[routed.RoutedLink]:
    exp = _exp()
    taps = [(f"ta{k}", f"tb{k}") for k in range(slots)]
    return routed.plan_routed(exp.links, missing, taps, {lk.name: (lk.a, lk.b) for lk in exp.topology.links})


def test_a_link_goes_through_the_guest_when_an_egress_needs_what_the_host_lacks() -> None:
    (r,) = _plan({"pie", "netem"})
    assert (r.link, r.slot, r.a, r.b, r.tap_a, r.tap_b) == ("bottleneck", 0, "r1", "r2", "ta0", "tb0")
    # a -> b enters the guest on x0 (a's side) and leaves on y0: a's egress is planned on y0, b's on x0
    assert (r.guest_dev("r1"), r.guest_dev("r2")) == ("y0", "x0")
    assert [x.link for x in _plan({"netem"})] == ["bottleneck"]  # the reverse egress alone is enough
    assert _plan(set()) == [] and _plan({"fq_pie"}) == []  # nothing it needs is missing
    with pytest.raises(ValueError, match="1 links need the router guest .* 0 slots"):
        _plan({"pie"}, slots=0)
    assert routed.routed_count(_exp().links, {"pie"}) == 1


def test_a_link_the_file_sends_through_the_router_goes_there_even_when_the_host_has_what_it_needs() -> None:
    # h2quic's RTT 0 cell: HTB and a FIFO the host has, beside cells with netem that go through the guest
    raw = {**RAW, "links": {"bottleneck": {"rate": "4500kbit", "through_router": True,
                                           "forward": {"qdisc": {"kind": "pfifo", "limit": 50}}}}}
    (run,) = expand(raw)
    taps = [("ta0", "tb0")]
    ends = {lk.name: (lk.a, lk.b) for lk in run.experiment.topology.links}
    (r,) = routed.plan_routed(run.experiment.links, {"netem", "pie"}, taps, ends)
    assert r.link == "bottleneck" and routed.routed_count(run.experiment.links, {"netem"}) == 1
    (plain,) = expand({**raw, "links": {"bottleneck": {"rate": "4500kbit"}}})
    assert routed.plan_routed(plain.experiment.links, {"netem", "pie"}, taps, ends) == []
    assert not plain.experiment.link("bottleneck").through_router
    fast = expand({**raw, "links": {"bottleneck": {"rate": "200mbit", "through_router": True}}})[0].experiment
    with pytest.raises(ConfigError, match=r"^links.bottleneck.rate: the links through the router guest add up to "
                                          r"400 Mbit/s"):  # nothing is missing, and the guest is still its path
        routed.check_capacity(5.0, fast.links, set())


def test_features_per_egress_and_what_the_guest_cannot_add() -> None:
    link = _exp().link("bottleneck")
    assert routed.egress_features(link.forward) == {"htb", "pie"}
    assert routed.egress_features(link.reverse) >= {"netem"}
    assert routed.unroutable({"pie": "k1", "netem": "k2"}) == {}
    assert routed.unroutable({"pie": "k1", "mptcp": "apps.v"}) == {"mptcp": "apps.v"}


def test_auto_picks_the_router_for_missing_qdiscs_and_the_vm_for_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.ENV, raising=False)
    runs = expand(RAW)
    lacks: dict[str, str] = {"pie": "links.bottleneck.forward.qdisc.kind", "netem": "links.bottleneck.reverse.delay"}
    monkeypatch.setattr(runtime, "missing_on_host", lambda exp: dict(lacks))
    assert runtime.choose("auto", runs) == "router" and runtime.choose("router", runs) == "router"
    assert runtime.router_plan(runs) == (frozenset({"pie", "netem"}), 1)
    lacks["mptcp"] = "apps.video"
    assert runtime.choose("auto", runs) == "vm"
    with pytest.raises(KernelFeatureError, match=r"apps.video: this kernel has no 'mptcp' .* --runtime vm"):
        runtime.choose("router", runs)
    lacks.clear()
    assert runtime.choose("auto", runs) == "host"


def test_the_host_error_names_both_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "missing_on_host", lambda exp: {"pie": "links.bottleneck.forward.qdisc.kind"})
    with pytest.raises(KernelFeatureError, match=r"^links.bottleneck.forward.qdisc.kind: this kernel has no 'pie' .*"
                                                 r"--runtime auto \(the router runtime.*--runtime vm"):
        kernel.require_host_features(_exp())


def test_slots_and_qemu_arguments() -> None:
    slots = plan_slots(2, "beef")
    names = [n for s in slots for n in (s.tap_a, s.tap_b)]
    assert names == ["nxr0abeef", "nxr0bbeef", "nxr1abeef", "nxr1bbeef"] and all(len(n) <= 15 for n in names)
    assert len({m for s in slots for m in (s.mac_a, s.mac_b)}) == 4
    argv = qemu_devices(slots, Path("/x/ctl.sock"))
    nics = [argv[i + 1] for i, a in enumerate(argv) if a == "-device" and argv[i + 1].startswith("virtio-net-pci")]
    assert len(nics) == 4 and all("guest_tso4=off" in n and "host_tso4=off" in n and "gso=off" in n for n in nics)
    assert "tap,id=n0a,ifname=nxr0abeef,script=no,downscript=no,vhost=off" in argv
    assert "socket,id=nestctl,path=/x/ctl.sock,server=on,wait=off" in argv
    assert "virtserialport,chardev=nestctl,name=nest.ctl" in argv
    with pytest.raises(VMError, match="1 to 8 links"):
        plan_slots(9, "beef")


def test_the_clock_offset_is_the_fastest_round_trip_s_midpoint() -> None:
    rounds = [(10.0, 110.3, 10.4), (11.0, 111.0005, 11.001), (12.0, 112.9, 13.0)]
    offset, error = best_offset(rounds)
    assert offset == pytest.approx(100.0) and error == pytest.approx(0.0005)


def test_the_guest_s_busy_share_between_samples() -> None:
    # user nice system idle iowait irq softirq steal
    samples = [(0.0, [0, 0, 0, 100, 0, 0, 0, 0]), (1.0, [10, 0, 10, 180, 0, 0, 0, 0]),
               (2.0, [110, 0, 10, 180, 0, 0, 0, 0])]
    assert guest_busy(samples) == {"guest_busy_mean": 0.6, "guest_busy_max": 1.0, "guest_saturated_intervals": 1,
                                   "guest_intervals": 2}
    assert guest_busy(samples[:1]) == {}
    fine = [(t / 10, [t, 0, 0, 100 + t, 0, 0, 0, 0]) for t in range(0, 31)]  # 100 ms samples, half busy
    assert [t for t, _ in guest_shares(fine)] == [1.0, 2.0, 3.0]  # one share per 1 s window, not per sample
    assert all(share == pytest.approx(0.5) for _, share in guest_shares(fine))


def test_the_guard_counts_a_saturated_guest_window_once() -> None:
    record = {"windows": 5, "saturated_windows": 1, "saturated_t": [2.0], "saturated_by": {"machine": 1, "process": 0}}
    got = add_guest_rule(record, [(1.0, 0.2), (2.02, 0.99), (4.0, 0.97)])
    assert got["saturated_t"] == [2.0, 4.0] and got["saturated_windows"] == 2
    assert got["saturated_by"] == {"machine": 1, "process": 0, "guest": 2}


def test_a_routed_link_is_captured_from_a_s_ingress_to_b_s_end() -> None:
    exp = _exp()
    (target,) = plan_targets(exp, lambda n: f"ns-{n}", routed=("bottleneck",))
    assert (target.node, target.dev, target.exit_node, target.exit_dev) == ("r1", "r2", "r2", "r1")
    taps = {(t.node, t.dev, t.direction) for t in plan_taps([target])}
    assert ("r1", "r2", "out") in taps and ("r2", "r1", "in") in taps  # the TAP too: the host's part apart
    assert {("r1", d, "in") for d in target.ingress_devs} <= taps
    (host,) = plan_targets(exp, lambda n: f"ns-{n}")
    assert host.exit_node == "" and ("r1", "r2", "out") in {(t.node, t.dev, t.direction) for t in plan_taps([host])}


class FakeRouter:
    """What the collectors ask of the guest, answered from memory (guest clock = host clock + 100 s)."""

    missing = frozenset({"pie"})
    taps = (("ta0", "tb0"),)
    pid = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        import time

        self.calls.append((op, args))
        if op == "dump":
            now = time.monotonic() + 100.0
            row = {"kind": "pie", "backlog_bytes": 1, "backlog_pkts": 1, "drops": 0, "overlimits": 0, "sent_pkts": 5,
                   "sent_bytes": 500, "delay_ms": 4.5, "prob": "0", "handle": 0x100000, "parent": 0x10001}
            return {"ok": True, "samples": [{"dev": "y0", "t": now - 0.25, "rows": [row]}],
                    "cpu": [1, 0, 1, 10, 0, 0, 0, 0], "t": now}
        if op == "classes":
            return {"ok": True, "classes": {"y0": {"1:1": {"index": 3, "classid": 0x10001, "rate_bps": 8000,
                                                           "ceil_bps": 8000, "buffer_ticks": 1, "cbuffer_ticks": 1,
                                                           "quantum": 1}}}}
        return {"ok": True}

    def host_time(self, t_guest: float) -> float:
        return t_guest - 100.0

    def sync_clock(self) -> tuple[float, float]:
        return 100.0, 0.0

    def summary(self) -> dict[str, Any]:
        return {}

    def annotate(self, manifest: dict[str, Any]) -> None:
        pass


def test_the_sampler_puts_the_guest_s_dumps_on_the_run_clock(tmp_path: Path) -> None:
    import time

    t0 = time.monotonic()
    router = FakeRouter()
    sampler = QdiscSampler(tmp_path / "qdisc.csv", [], interval_s=10.0, clock=lambda: time.monotonic() - t0 + 50.0,
                           router=router, guest_targets=[("y0", "r1", "r2", "bottleneck")])
    sampler.start()
    sampler.stop()
    rows = (tmp_path / "qdisc.csv").read_text().splitlines()
    assert rows[0].startswith("t,node,dev,link,kind,handle,parent")
    first = rows[1].split(",")
    assert first[1:7] == ["r1", "r2", "bottleneck", "pie", "10:", "1:1"]  # the host's names, not the guest's NIC
    assert 49.0 < float(first[0]) < 50.5  # dumped 0.25 s before the answer, on the run clock (starts at 50)
    assert router.calls[0] == ("dump", {"devs": ["y0"]}) and len(sampler.guest_cpu) == 2


def test_trace_rates_of_a_routed_egress_go_to_the_guest() -> None:
    router = FakeRouter()
    plan = plan_egress(routed.GUEST_NS, "y0", _exp().link("bottleneck").forward)
    egress = Egress(link="bottleneck", node="r1", peer="r2", dev="r2", ns="nx-r1", plan=plan, routed=True)
    rates = routed.GuestRates([egress], router)
    rates.set(egress, 8000)
    assert router.calls[-1] == ("rate", {"dev": "y0", "classid": "1:1", "rate_bps": 8000, "burst_bytes": None})
    got = rates.read(egress)
    assert (got.rate_bps, got.ceil_bps) == (8000, 8000)
    rates.close()
    from nest_experiments.errors import NetworkSetupError

    with pytest.raises(NetworkSetupError, match="without the router guest"):
        routed.GuestRates([egress], None)


def test_a_design_the_guest_cannot_forward_is_refused_naming_the_key() -> None:
    exp = _exp()
    routed.check_capacity(exp.duration_s, exp.links, {"pie"})  # 10 Mbit/s each way: fine
    with pytest.raises(Exception, match=r"^links.bottleneck.rate: the links through the router guest add up to "
                                        r"20 Mbit/s, more than .* \(5 Mbit/s in all\)"):
        routed.check_capacity(exp.duration_s, exp.links, {"pie"}, limit_bps=5_000_000)
    routed.check_capacity(exp.duration_s, exp.links, set(), limit_bps=1)  # nothing routed: nothing to refuse


def test_the_guest_s_htb_classes_get_a_larger_burst_and_keep_it_through_rate_changes() -> None:
    from nest_experiments.net import netlink

    plan = plan_egress(routed.GUEST_NS, "y0", _exp().link("bottleneck").forward, htb_burst_bytes=15_000)
    (cls,) = [c for c in plan.commands if "class" in c]
    assert list(cls[-4:]) == ["burst", "15000", "cburst", "15000"] and plan.htb_burst_bytes == 15_000
    assert "burst" not in plan_egress("ns", "d", _exp().link("bottleneck").forward).commands[2]  # the host's: tc's
    rate = 10_000_000 // 8
    assert netlink.burst_ticks(rate, 15_000) == pytest.approx(15_000 / netlink.MTU * netlink.burst_ticks(rate), rel=0.01)
    default = netlink.change_request(index=3, classid="1:1", parent="1:", rate_bps=10_000_000, seq=1)
    bigger = netlink.change_request(index=3, classid="1:1", parent="1:", rate_bps=10_000_000, seq=1, burst_bytes=15_000)
    assert len(default) == len(bigger) and default != bigger


def test_a_run_without_paper_says_it_is_a_quick_look() -> None:
    from nest_experiments.config import load_default_raw
    from nest_experiments.runs.launch import quick_look_note

    note = quick_look_note(load_default_raw(), paper=False)
    assert note.startswith("a quick look at a reduced design, not the paper's: `run --paper`")
    assert "apps.voip1.rate = 10" in note
    assert quick_look_note(load_default_raw(), paper=True) == "" and quick_look_note(RAW, paper=False) == ""


def test_qemu_is_judged_per_thread_not_as_one_process() -> None:
    """The router guest's qemu at 1.1 CPUs over its threads is not one saturated CPU: left out of the process
    rule (its threads get the VM runtime's per-thread rule from the host's samples)."""
    from nest_experiments.collectors.cpu import CpuMonitor, ProcName, ProcWindow

    mon = CpuMonitor(lambda: 0.0)
    mon.samples = [(1.0, 0.6), (2.0, 0.6)]
    mon.windows = [ProcWindow(1.0, {(42, 7): 1.1, (50, 9): 0.3}), ProcWindow(2.0, {(42, 7): 1.05, (50, 9): 0.99})]
    mon.names = {(42, 7): ProcName(comm="qemu-system-x86"), (50, 9): ProcName(comm="sipp")}
    assert mon.summary()["cpu"]["saturated_t"] == [1.0, 2.0]
    cpu = mon.summary(per_thread=frozenset({42}))["cpu"]
    assert cpu["saturated_t"] == [2.0] and [p["comm"] for p in cpu["processes"]] == ["sipp"]
    # the warning by the same rules (a router run warned "qemu-system-x86 ... 17 s saturated, peak 113%" while
    # its record counted 0 windows: the warning left qemu in the process rule)
    (warning,) = mon.warnings(per_thread=frozenset({42}))
    assert "sipp" in warning and "qemu" not in warning and "in 1 of 2" in warning, warning
    assert "qemu" in " ".join(mon.warnings())  # without the runtime's qemu pid it is a process as any other


def test_router_priority_reads_its_variable_and_refuses_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.vm.router import router_priority

    monkeypatch.delenv("NEST_EXP_ROUTER_FIFO", raising=False)
    assert router_priority() == 1  # the default: qemu at SCHED_FIFO 1
    assert router_priority("0") == 0 and router_priority("off") == 0 and router_priority("42") == 42
    for bad in ("100", "-1", "high"):
        with pytest.raises(VMError, match="NEST_EXP_ROUTER_FIFO"):
            router_priority(bad)


def test_router_at_fifo_refuses_as_many_vcpus_as_host_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.vm.router import RouterVM

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with pytest.raises(VMError, match="fewer vCPUs"):
        RouterVM(slots=2, missing=frozenset({"pie"}), cpus=2, fifo=1)
    assert RouterVM(slots=2, missing=frozenset({"pie"}), cpus=2, fifo=0).fifo == 0  # nothing started yet
    assert RouterVM(slots=2, missing=frozenset({"pie"}), cpus=1, fifo=1).summary()["host_fifo"] == 1


def test_qemu_preexec_sets_fifo_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.vm import qemu

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(qemu.os, "sched_setscheduler",
                        lambda pid, policy, param: calls.append((policy, param.sched_priority)))
    monkeypatch.setattr(qemu, "_prctl", lambda: (lambda *a: 0))
    monkeypatch.setattr(qemu.os, "getppid", qemu.os.getpid)  # as in the child: its parent is this process
    qemu._make_preexec()()
    assert calls == []
    qemu._make_preexec(3)()
    assert calls == [(qemu.os.SCHED_FIFO, 3)]
