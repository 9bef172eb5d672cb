"""Running experiments: one run (topology up, apps, samplers, teardown) and a sweep.

A run always ends with a manifest that says ``completed``, ``failed`` (with
the reason) or ``interrupted``; every CSV is written under a temp name and
renamed; the network and every process are gone when :func:`run_one`
returns or raises. A sweep skips runs whose folder says ``completed`` for
the same config, and goes on after a failed run.
"""

from __future__ import annotations

import copy
import functools
import gc
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from nest_experiments import __version__, resources
from nest_experiments.apps.base import App, tool_version
from nest_experiments.collectors.capture import PacketCapture, match_captures
from nest_experiments.collectors.cpu import PROCESS_FIELDS, CpuMonitor, add_guest_rule, process_cpu_s
from nest_experiments.collectors.qdisc import QdiscSampler
from nest_experiments.collectors.wire import WireCapture
from nest_experiments.config import APP_KINDS, EgressConfig, Experiment, parse_experiment
from nest_experiments.config.sweep import RunSpec, set_path
from nest_experiments.errors import Interrupted, NestExpError, RunError
from nest_experiments.net import nftplan
from nest_experiments.net.kernel import IPROUTE2_VERSION
from nest_experiments.net.network import Network
from nest_experiments.net.procs import RunState, clean_dead_runs, live_runs, new_prefix, run_lock
from nest_experiments.net.routed import Router
from nest_experiments.net.warm import WarmPool
from nest_experiments.rundir import (
    CONFIG,
    CPU,
    CPU_PROCS,
    ERROR_LOG,
    FIREWALL,
    LINKS,
    MANIFEST,
    QDISC,
    SATURATED,
    SCHEMA_VERSION,
    is_completed,
    write_atomic,
    write_csv,
    write_json,
)
from nest_experiments.runs import runtime
from nest_experiments.runs.outcome import RunOutcome, config_text, now_iso, sweep_summary
from nest_experiments.runs.phases import Laps, append_sweep_record, new_sweep_id, process_age_s, uptime_s
from nest_experiments.runs.progress import Progress
from nest_experiments.runs.traceplay import TracePlayer

RESULTS_ROOT = resources.results_root()
FINISH_GRACE_S = 15.0
DONE_POLL_S = 0.2  # experiment.end_when_done: how often the traffic phase asks whether every app is done
# Behind a slow link the tools' closing exchanges wait in its queue: iperf3's TEST_END, results and IPERF_DONE
# each cross a bottleneck that its flows still keep full from their send buffers, and a lost one waits an RTO
# of about the queue's delay (at 64 kbit/s a 20-packet FIFO is 3.8 s; the 1000-packet default, 190 s).
QUEUE_CROSSINGS = 4
MAX_QUEUE_GRACE_S = 600.0
FIFO_DEFAULT_PKTS = 1000  # veth's txqueuelen: HTB's own leaf, and pfifo/bfifo without a limit
AQM_BURST_PKTS = 10  # an AQM keeps about its target, plus a burst, at rates where one packet outlasts the target
PACKET_BITS = 1514 * 8
WARMUP_MIN_TRAFFIC_S = 10.0  # a warm-up lasts at least this long after its last app started
CLOCKSOURCE = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource")


def finish_grace_s(exp: Experiment, *, vm: bool) -> float:
    """How long after the run's duration its apps may take to finish: :data:`FINISH_GRACE_S`, in the VM as long
    again as the run (under TCG emulation the tools run several times slower), and :data:`QUEUE_CROSSINGS` times
    the longest a full queue of a shaped egress takes to drain at the rate it has then (capped)."""
    return FINISH_GRACE_S + (exp.duration_s if vm else 0.0) + queue_grace_s(exp)


def queue_grace_s(exp: Experiment) -> float:
    """The part of the finish grace that the queues need (see :func:`finish_grace_s`)."""
    queue_s = max((queue_drain_s(e, exp.duration_s) for link in exp.links for _, _, e in link.egresses()), default=0.0)
    return min(MAX_QUEUE_GRACE_S, QUEUE_CROSSINGS * queue_s)


def queue_drain_s(e: EgressConfig, at_s: float) -> float:
    """Seconds a full leaf queue of ``e`` takes to drain at the lowest rate it has from ``at_s`` to
    ``at_s + FINISH_GRACE_S`` (0 for an unshaped egress)."""
    steps = e.trace_steps(at_s + FINISH_GRACE_S)
    rate = min([r for t, r in steps if t > at_s] + ([r for t, r in steps if t <= at_s][-1:] or [e.rate_bps or 0]))
    if rate <= 0:
        return 0.0
    q = e.qdisc
    limit = q.param("limit") if q else None
    if q is None or q.kind == "pfifo":
        return (limit or FIFO_DEFAULT_PKTS) * PACKET_BITS / rate
    if q.kind == "bfifo":
        return 8 * (limit or FIFO_DEFAULT_PKTS * PACKET_BITS / 8) / rate
    return float(q.param("target", 0.0)) + AQM_BURST_PKTS * PACKET_BITS / rate


def clocksource() -> str:
    """The kernel's clock (``tsc``, ``kvm-clock``; ``hpet`` in a TCG guest costs ~2 us per read: vm.qemu)."""
    try:
        return CLOCKSOURCE.read_text().strip()
    except OSError:
        return "?"


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise :class:`Interrupted`, SIGINT raises KeyboardInterrupt.

    Only in this process: a forked child (pyroute2 forks to open sockets in a
    namespace, and signals it with SIGTERM) must not unwind our stack and run
    our teardown, so it exits at once.
    """
    owner = os.getpid()

    def handler(signum: int, _frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(f"received {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Run:
    """One run of an experiment, into ``run_dir``."""

    def __init__(self, spec: RunSpec, run_dir: Path, *, runs_before: int = 0,
                 extra: dict[str, Any] | None = None, warm: WarmPool | None = None,
                 after_traffic: Callable[[], None] | None = None, router: Router | None = None) -> None:
        self.spec = spec
        self.router = router  # the router runtime's guest (vm.router), or None
        self.extra = dict(extra or {})  # more manifest fields (a cluster task's: where it ran)
        self.runs_before = runs_before  # runs this process (in the VM runtime: this VM) executed before this one
        self.exp: Experiment = spec.experiment
        self.run_dir = run_dir
        self.manifest: dict[str, Any] = {}
        self.apps: list[App] = []
        self.t0 = time.monotonic()
        self.laps = Laps()  # the manifest's ``phases`` (runs.phases)
        self.app_start_s: dict[str, float] = {}
        self.app_prepare_s: dict[str, float] = {}  # inside the app_prepare phase, per app
        self.app_done_t: dict[str, float] = {}  # the drain phase: when each app's finish returned
        # the apps' Python processes (net.warm): given, started while the run before collected (run_sweep), or
        # started as this run begins
        self.warm = warm if warm is not None else WarmPool()
        self._warm_given = warm is not None
        self.after_traffic = after_traffic  # called once the traffic's CPU is measured (run_sweep: the next run's pool)

    def clock(self) -> float:
        return time.monotonic() - self.t0

    def execute(self) -> RunOutcome:
        started = time.monotonic()
        self.laps.restart()
        if self.run_dir.exists():  # run again (its config changed, it failed or was interrupted): nothing of the
            shutil.rmtree(self.run_dir)  # last attempt stays (a stale go file started the players at once)
        self.run_dir.mkdir(parents=True)
        write_atomic(self.run_dir / CONFIG, config_text(self.spec))
        self._init_manifest()
        try:
            if warm_starts() and not self._warm_given:
                self.warm.start(warm_modules(self.spec))
            cleaned = clean_dead_runs()
            if cleaned:
                self.manifest["warnings"].append(f"cleaned up what dead runs left: {', '.join(cleaned)}")
            self.laps.lap("cleanup")
            self._run_network()
            if runtime.current() != "vm":  # in the VM runtime the host matches after the guest exits (launch.py)
                self.manifest["warnings"] += match_captures(self.run_dir, self.manifest)
                self.laps.lap("match")
            self.manifest["status"] = "completed"
        except (KeyboardInterrupt, Interrupted) as exc:
            self._fail("interrupted", str(exc) or "interrupted (SIGINT)")
            raise
        except NestExpError as exc:
            self._fail("failed", str(exc))
        except Exception as exc:  # a bug: record it, keep the sweep going
            self._fail("failed", f"{type(exc).__name__}: {exc}")
            write_atomic(self.run_dir / ERROR_LOG, traceback.format_exc())
        finally:
            self.warm.close()
            self.manifest["warm_started"] = self.warm.started
            self.manifest["finished"] = now_iso()
            self.manifest["phases"] = self.laps.as_dict()
            self.manifest["app_start_s"] = {k: round(v, 3) for k, v in self.app_start_s.items()}
            self.manifest["app_prepare_s"] = {k: round(v, 3) for k, v in self.app_prepare_s.items()}
            self.manifest["app_done_t"] = dict(self.app_done_t)
            write_json(self.run_dir / MANIFEST, self.manifest)
        m = self.manifest
        return RunOutcome(self.spec.name, m["status"], m.get("reason", ""), time.monotonic() - started, self.run_dir)

    def _fail(self, status: str, reason: str) -> None:
        self.manifest["status"] = status
        self.manifest["reason"] = reason

    def _init_manifest(self) -> None:
        self.manifest = {
            "schema_version": SCHEMA_VERSION, "status": "running", "experiment": self.exp.name,
            "run": self.spec.name, "repetition": self.spec.repetition, "point": dict(self.spec.point),
            "position": self.spec.position, "runs_before": self.runs_before,
            "seed": self.spec.seed, "runtime": "router" if self.router is not None else runtime.current(),
            "kernel": platform.release(),
            "started": now_iso(), "warnings": [], "versions": self._versions(),
            "tcp_congestion_control": self.exp.congestion_control, "duration_s": self.exp.duration_s,
            "clocksource": clocksource(), **self.extra,
        }
        if runtime.current() == "vm":
            self.manifest["vm"] = runtime.vm_settings()
        if self.router is not None:
            self.manifest["router"] = self.router.summary()
        write_json(self.run_dir / MANIFEST, self.manifest)

    def _versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"nest_experiments": __version__, "python": platform.python_version(), "nest": version("nest"),
                "pyroute2": version("pyroute2"), "iproute2": tool_version(list(IPROUTE2_VERSION))}

    def _run_network(self) -> None:
        state = RunState(prefix=new_prefix())
        self.manifest["prefix"] = state.prefix
        others = set(live_runs(other_than=state.prefix))
        with Network(self.exp.topology, self.exp.links, state=state, congestion_control=self.exp.congestion_control,
                     firewalls=self.exp.firewalls, router=self.router, nodes=self.exp.nodes) as net:
            self.laps.lap("topology")
            self.manifest["topology_s"] = dict(net.build_s)
            # what [nodes.NAME] set: the build read each value back (Network.sysctl stops it on a mismatch)
            if any(n.sysctls() for n in self.exp.nodes):
                self.manifest["node_sysctls"] = {n.name: n.sysctls() for n in self.exp.nodes if n.sysctls()}
            write_json(self.run_dir / LINKS, {"egresses": [_egress_info(e, self.exp) for e in net.egresses]})
            self.apps = [_launcher(a.kind)(a, net=net, run_dir=self.run_dir, clock=self.clock,
                                           duration_s=self.exp.duration_s, in_vm=runtime.current() == "vm")
                         for a in self.exp.apps]
            for app in self.apps:
                app.warm = self.warm
            try:
                self._run_apps(net)
            finally:
                # other emulations on this machine during this one (cluster workers side by side share the CPU)
                self.manifest["parallel_runs"] = sorted(others | set(live_runs(other_than=state.prefix)))
                self.laps.restart()
                for app in self.apps:
                    app.stop()
                    self.manifest["warnings"] += app.warnings
                    self.manifest["versions"].update(app.versions)
                self._write_firewall_counters(net)
                self.laps.lap("app_stop")
        self.laps.lap("teardown")

    def _write_firewall_counters(self, net: Network) -> None:
        """``firewall.csv``: what each firewall matched and dropped (nftplan.COUNTER_FIELDS); a failed read is a
        warning (this runs in a ``finally``: it must not hide the run's own error)."""
        if not net.firewall_plans:
            return
        try:
            write_csv(self.run_dir / FIREWALL, nftplan.COUNTER_FIELDS, net.firewall_counters())
        except NestExpError as exc:
            self.manifest["warnings"].append(f"firewall counters not read: {exc}")

    def _run_apps(self, net: Network) -> None:
        for app in self.apps:  # every app's servers started, then waited for: they start side by side
            t = time.monotonic()
            app.prepare()
            self.app_prepare_s[app.cfg.name] = time.monotonic() - t
        for app in self.apps:
            t = time.monotonic()
            app.ready()
            self.app_prepare_s[app.cfg.name] += time.monotonic() - t
        self.laps.lap("app_prepare")
        capture = PacketCapture.for_run(self.exp, net, self.run_dir)  # experiment.qdelay_links: tcpdump on routers
        capture.start()  # capturing before the run clock and any traffic
        wire_capture = WireCapture.for_run(self.exp, net, self.run_dir)  # experiment.wire_links: bytes on the wire
        try:
            wire_capture.start()
        except BaseException:
            capture.stop(t0=self.t0, keep=False)
            raise
        sampled = [e for e in net.egresses if e.link in self.exp.sample_links]
        if self.router is not None:  # its clock offset again: one measurement per run
            self.router.sync_clock()
            self.manifest["router"] = self.router.summary()
        sampler = QdiscSampler(self.run_dir / QDISC, [(e.ns, e.node, e.dev, e.link) for e in sampled if not e.routed],
                               interval_s=self.exp.sample_interval_s, clock=self.clock, router=self.router,
                               guest_targets=[(e.plan.dev, e.node, e.dev, e.link) for e in sampled if e.routed])
        deadline = self.exp.duration_s + finish_grace_s(self.exp, vm=runtime.current() == "vm")
        rates = TracePlayer.for_run(self.exp, net, self.run_dir, clock=self.clock, until_s=deadline)  # trace-driven links
        try:
            sampler.open()
            rates.open()
        except BaseException:
            sampler.stop(keep=False)
            rates.stop(keep=False)
            capture.stop(t0=self.t0, keep=False)
            wire_capture.stop(keep=False)
            raise
        self.laps.lap("collectors_start")
        quiet_gc()
        self.t0 = time.monotonic()
        self.manifest["t0_wall"] = now_iso()
        cpu = CpuMonitor(self.clock, pids_by_app=self._app_pids)
        for app in self.apps:
            app.on_exit = functools.partial(cpu.read_exited, app.cfg.name)
        sampler.start()
        rates.start()
        cpu.start()
        qemu_cpu0 = process_cpu_s(self.router.pid) if self.router is not None and self.router.pid else None
        try:
            self._schedule()
            self.laps.lap("traffic")
            for app in self.apps:
                app.finish(deadline)
                self.app_done_t[app.cfg.name] = round(self.clock(), 3)  # when its finish returned (run clock)
            self.manifest["traffic_end_t"] = round(self.clock(), 3)
            self.laps.lap("drain")
        finally:
            self.laps.restart()  # after a failure the traffic's time is in no phase
            cpu.stop()
            self._after_traffic()
            gc.unfreeze()
            trace_error = self._stop_trace(rates)  # raised below: the sampler and captures stop first
            sampler.stop(keep=True)
            capture.stop(t0=self.t0, keep="traffic_end_t" in self.manifest)  # pcaps only of finished traffic
            wire_capture.stop(keep="traffic_end_t" in self.manifest)
            self.manifest["warnings"] += wire_capture.warnings
            if sampler.guest_cpu:
                self.manifest["router"] = {**self.manifest.get("router", {}), **guest_busy(sampler.guest_cpu)}
            if qemu_cpu0 is not None and self.router is not None and self.router.pid:
                used = process_cpu_s(self.router.pid)  # qemu on the host: its vCPU, I/O and TAP threads
                if used is not None:
                    self.manifest["router"]["qemu_cpu_share"] = round((used - qemu_cpu0) / max(self.clock(), 1e-3), 4)
            qemu = frozenset({self.router.pid}) if self.router is not None and self.router.pid else frozenset()
            self.manifest.update(cpu.summary(per_thread=qemu))  # qemu per thread, as in the VM runtime:
            if self.router is not None:  # its host steal and its threads' shares (vm.hostload)
                self.router.annotate(self.manifest)
            if sampler.guest_cpu:  # the guard's guest rule (collectors.cpu.add_guest_rule)
                self.manifest["cpu"] = add_guest_rule(self.manifest.get("cpu") or {}, guest_shares(sampler.guest_cpu),
                                                      interval_s=1.0)
            self.manifest["app_cpu_s"] = cpu.app_cpu_s()
            self.manifest.update(cpu.breakdown())
            self.manifest["warnings"] += cpu.warnings(per_thread=qemu)
            write_csv(self.run_dir / CPU, ("t", "busy"), ({"t": t, "busy": round(b, 3)} for t, b in cpu.samples))
            write_csv(self.run_dir / CPU_PROCS, PROCESS_FIELDS, cpu.process_rows())
            self.laps.lap("collection")
        if trace_error is not None:
            raise trace_error
        self._write_outputs()
        self.laps.lap("outputs")
        failures = [app.failure for app in self.apps if app.failure]
        if failures:  # its outputs stay for a look; as "failed" it is no session, and a resumed sweep runs it again
            raise RunError("; ".join(failures))

    def _after_traffic(self) -> None:
        """The caller's hook (the next run's warm processes: their imports overlap this run's collection and
        teardown, not the next run's topology build); a failure is a warning of this run, not its error."""
        if self.after_traffic is None:
            return
        try:
            self.after_traffic()
        except OSError as exc:
            self.manifest["warnings"].append(f"the next run's warm processes did not start: {exc}")

    def _stop_trace(self, rates: TracePlayer) -> NestExpError | None:
        """Stop the trace player; its summary into the manifest; its error returned, not raised."""
        try:
            rates.stop(keep=True)
            return None
        except NestExpError as exc:
            return exc
        finally:
            if rates.changes:
                self.manifest["trace"] = rates.summary()
                self.manifest["warnings"] += rates.warnings()

    def _app_pids(self) -> dict[str, list[int]]:
        return {app.cfg.name: [p.pid for p in app.procs if p.returncode is None] for app in self.apps}

    def _schedule(self) -> None:
        for app in sorted(self.apps, key=lambda a: a.cfg.start_s):
            delay = app.cfg.start_s - self.clock()
            if delay > 0:
                time.sleep(delay)
            t = time.monotonic()
            app.start()
            self.app_start_s[app.cfg.name] = self.app_start_s.get(app.cfg.name, 0.0) + time.monotonic() - t
        self.manifest["traffic_start_t"] = round(min((getattr(a, "t_start", 0.0) for a in self.apps), default=0.0), 3)
        fault_at = os.environ.get("NEST_EXP_FAULT_AT")  # test seam: an exception in the middle of a run
        if fault_at:
            time.sleep(max(0.0, float(fault_at) - self.clock()))
            raise RuntimeError(f"injected fault at t={fault_at} s (NEST_EXP_FAULT_AT)")
        if not self.exp.end_when_done:
            remaining = self.exp.duration_s - self.clock()
            if remaining > 0:
                time.sleep(remaining)
            return
        while self.clock() < self.exp.duration_s and not all(app.done() for app in self.apps):
            time.sleep(min(DONE_POLL_S, max(0.0, self.exp.duration_s - self.clock())))
        self.manifest["ended_when_done"] = self.clock() < self.exp.duration_s

    def _write_outputs(self) -> None:
        merged: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
        for app in self.apps:
            for name, (fields, rows) in app.outputs().items():
                merged.setdefault(name, (fields, []))[1].extend(rows)
        for name, (fields, rows) in merged.items():
            write_csv(self.run_dir / name, fields, rows)


def guest_shares(samples: list[tuple[float, list[int]]], span_s: float = 1.0) -> list[tuple[float, float]]:
    """The router guest's busy share (all its vCPUs) over consecutive intervals of at least ``span_s`` (the CPU
    guard's window) between qdisc samples: (run clock at the interval's end, share)."""
    out: list[tuple[float, float]] = []
    if not samples:
        return out
    t0, a = samples[0]
    for t, b in samples[1:]:
        if t - t0 < 0.95 * span_s:
            continue
        total = sum(b) - sum(a)
        idle = (b[3] + b[4]) - (a[3] + a[4])
        if total > 0:
            out.append((t, 1 - idle / total))
        t0, a = t, b
    return out


def guest_busy(samples: list[tuple[float, list[int]]]) -> dict[str, Any]:
    """:func:`guest_shares` summed up: mean, max, and how many intervals were at or above
    :data:`~nest_experiments.rundir.SATURATED` (its forwarding then lags)."""
    shares = [share for _, share in guest_shares(samples)]
    if not shares:
        return {}
    return {"guest_busy_mean": round(sum(shares) / len(shares), 4), "guest_busy_max": round(max(shares), 4),
            "guest_saturated_intervals": sum(x >= SATURATED for x in shares), "guest_intervals": len(shares)}


def quiet_gc() -> None:
    """Collect once, then move every object the runner holds into the collector's permanent generation
    (``gc.freeze``) until the traffic ends: the collector's full passes during the traffic then walk only
    what the run allocates, not the runner's imports (pyroute2, NeST, the apps: a full pass over them cost
    ~6 ms on this host, ~8x that in the TCG guest, every few seconds of a run). What an earlier run of this
    process froze (one that failed before it could unfreeze) is collected first."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def warm_starts() -> bool:
    """Whether our Python apps start warm (net.warm); ``NEST_EXP_WARM=0`` starts them cold, as before (for
    bench/phase_split.py's before and after)."""
    return os.environ.get("NEST_EXP_WARM", "1").strip().lower() not in ("0", "off", "no", "false")


def warm_modules(spec: RunSpec) -> list[str]:
    """The Python modules ``spec``'s apps run (each started warm: net.warm), in the apps' order."""
    return [m for a in spec.experiment.apps for m in _launcher(a.kind).warm_modules(a)]


def _launcher(kind: str) -> type[App]:
    cls: type[App] = APP_KINDS[kind].launcher_class()
    return cls


def _egress_info(e: Any, exp: Experiment) -> dict[str, Any]:
    link = exp.link(e.link)
    cfg = link.forward if e.node == link.a else link.reverse
    return {"link": e.link, "node": e.node, "peer": e.peer, "dev": e.dev, "rate_bps": cfg.rate_bps,
            "trace": cfg.trace.source if cfg.trace else None,  # rate_bps is then the trace's first rate (rates.csv)
            "delay_s": cfg.delay_s, "loss_pct": cfg.loss_pct, "leaf_handle": e.plan.leaf_handle,
            "qdisc": cfg.qdisc.kind if cfg.qdisc else None, "qdisc_params": dict(cfg.qdisc.params) if cfg.qdisc else {},
            "sampled": e.link in exp.sample_links, "routed": bool(e.routed)}  # routed: through the router guest


# ---------------------------------------------------------------- sweeps


def run_sweep(runs: list[RunSpec], *, results_root: Path = RESULTS_ROOT, out: TextIO = sys.stderr,
              after_each: Callable[[RunOutcome], None] | None = None, warmup_s: float = 0.0,
              sweep_id: str | None = None, router: Router | None = None) -> list[RunOutcome]:
    """Run every run not yet completed; print progress; go on after failures.

    One sweep at a time per machine (runs share interface names in the root
    namespace): a second one stops at once, before creating anything.
    ``warmup_s`` > 0: before the first run that is not skipped, that run's
    setting shortened to this length, thrown away (see vm.qemu.warmup_s).
    Each run (and the warm-up) starts the next run's warm processes as its traffic ends (:class:`_WarmNext`).
    Where the time went is appended to the experiment's ``sweeps.jsonl`` (runs.phases), as ``sweep_id``.
    ``router``: the router runtime's guest (vm.router), for every run (and the warm-up).
    """
    outcomes: list[RunOutcome] = []
    progress = Progress(total=len(runs), out=out)
    warm_next = _WarmNext(runs, results_root)
    # the guest has no host name ("(none)"): the VM runtime's runs say so
    here = "the VM runtime's guest" if runtime.current() == "vm" else f"this machine ({platform.node()})"
    t_start = time.monotonic()
    record = _sweep_start_record(sweep_id, router=router is not None)
    laps = Laps()
    try:
        with run_lock(), signals_as_exceptions():
            for i, spec in enumerate(runs):
                run_dir = results_root / spec.experiment.name / spec.name
                if is_completed(run_dir, config_text(spec)):
                    progress.skip(spec.name)
                    outcomes.append(RunOutcome(spec.name, "skipped", "", 0.0, run_dir))
                    continue
                if warmup_s > 0 and not any(o.status != "skipped" for o in outcomes):
                    laps.restart()
                    warm_up(spec, warmup_s, out=out, after_traffic=warm_next.starter_for(spec), router=router)
                    runtime.note_warm()  # the next sweep in this guest process (a block) starts warm
                    laps.lap("warmup")
                progress.start(spec.name, duration_s=spec.experiment.duration_s, where=here)
                laps.restart()
                outcome = Run(spec, run_dir, runs_before=sum(o.status != "skipped" for o in outcomes),
                              warm=warm_next.take(spec), after_traffic=warm_next.starter(i), router=router).execute()
                laps.lap("runs")
                record["traffic_s"] += spec.experiment.duration_s
                outcomes.append(outcome)
                progress.end(spec.name, status=outcome.status, seconds=outcome.seconds, where=here,
                             reason=outcome.reason)
                if after_each:
                    after_each(outcome)
    finally:
        warm_next.close()
        if runs and any(o.status != "skipped" for o in outcomes):
            wall = time.monotonic() - t_start
            spent = laps.as_dict()
            record.update(spent, runs_executed=sum(o.status != "skipped" for o in outcomes), wall_s=round(wall, 3),
                          between_s=round(wall - sum(spent.values()), 3))
            record["traffic_s"] = round(record["traffic_s"], 3)
            append_sweep_record(results_root / runs[0].experiment.name, record)
    print(sweep_summary(outcomes, time.monotonic() - t_start, results_root / runs[0].experiment.name if runs else
                        results_root), file=out, flush=True)
    return outcomes


class _WarmNext:
    """The next run's warm processes (net.warm), started as this run's traffic ends: their imports (seconds of
    CPU under TCG) then overlap this run's collection, teardown and the next cleanup, instead of the next run's
    topology build. Only where the next run to execute is known (the next run of the sweep not completed yet);
    with ``NEST_EXP_WARM=0`` nothing starts warm."""

    def __init__(self, runs: list[RunSpec], results_root: Path) -> None:
        self._runs = runs
        self._root = results_root
        self._pending: tuple[str, WarmPool] | None = None

    def take(self, spec: RunSpec) -> WarmPool | None:
        """The pool started for ``spec`` (None: the run starts its own)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        name, pool = pending
        if name == spec.name:
            return pool
        pool.close()
        return None

    def starter(self, i: int) -> Callable[[], None] | None:
        """What run ``i`` calls after its traffic: start the pool of the run that executes after it."""
        later = self._runs[i + 1:]
        nxt = next((s for s in later if not is_completed(self._root / s.experiment.name / s.name, config_text(s))), None)
        return None if nxt is None else self.starter_for(nxt)

    def starter_for(self, spec: RunSpec) -> Callable[[], None] | None:
        """What a run calls after its traffic (the warm-up: before ``spec``) to start ``spec``'s pool."""
        if not warm_starts() or not warm_modules(spec):
            return None

        def start() -> None:
            pool = WarmPool()
            self._pending = (spec.name, pool)
            pool.start(warm_modules(spec))

        return start

    def close(self) -> None:
        if self._pending is not None:
            self._pending[1].close()
            self._pending = None


def _sweep_start_record(sweep_id: str | None, *, router: bool = False) -> dict[str, Any]:
    """The runner's line of ``sweeps.jsonl`` as the sweep starts (runs.phases): in the VM runtime's guest, how
    long the guest had been up and how long this Python took to get here (the boot's and the interpreter's
    share of the sweep)."""
    record: dict[str, Any] = {"id": sweep_id or new_sweep_id(), "side": "runner",
                              "runtime": "router" if router else runtime.current(),
                              "started": now_iso(), "warmup": 0.0, "runs": 0.0, "traffic_s": 0.0}
    if runtime.current() == "vm":
        up, age = uptime_s(), process_age_s()
        record.update(guest_uptime_s=up, guest_python_start_s=None if age is None else round(age, 3))
    return record


def warm_up(spec: RunSpec, seconds: float, *, out: TextIO = sys.stderr,
            after_traffic: Callable[[], None] | None = None, router: Router | None = None) -> RunOutcome:
    """``spec``'s setting for ``seconds``, into a temp folder that is removed: every code path and file the
    sweep's runs use is then warm (see vm.qemu.warmup_s). Its outcome is printed, not recorded."""
    raw = copy.deepcopy(spec.experiment.raw)
    seconds = max(seconds, max((a.start_s for a in spec.experiment.apps), default=0.0) + WARMUP_MIN_TRAFFIC_S)
    set_path(raw, "experiment.duration", f"{seconds:g}s", origin="warm-up")
    warm = RunSpec(name=f"warmup-{spec.name}", repetition=spec.repetition, point=spec.point,
                   experiment=parse_experiment(raw))  # valid: only the duration changed, and it covers every start
    print(f"warm-up: {seconds:g} s of {spec.name}, not recorded", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="nx-warmup-") as tmp:
        outcome = Run(warm, Path(tmp) / warm.name, after_traffic=after_traffic, router=router).execute()
    print(f"warm-up: {outcome.status} in {outcome.seconds:.1f} s{f': {outcome.reason}' if outcome.reason else ''}",
          file=out, flush=True)
    return outcome
