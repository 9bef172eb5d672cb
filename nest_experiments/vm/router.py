"""The router runtime's guest: one qemu VM that only forwards, with the qdiscs the host kernel lacks.

Every namespace and application of a run is on the host (so no result is
shaped by an emulated CPU); each link that needs ``pie``, ``fq_pie`` or
``netem`` goes through this guest (:mod:`nest_experiments.net.routed`).
One guest serves every routed link of every run of a sweep: it boots once.

qemu creates the TAPs (``-netdev tap,ifname=...``; they live while qemu
holds them, so a killed runner, whose qemu dies with it, leaves none), one
virtio-net NIC per TAP with every offload off, and a virtio-serial port
whose host end is a Unix socket. The guest runs
:mod:`nest_experiments.net.router_agent` on the host's root file system (as
the VM runtime's guest runs the whole sweep: :mod:`nest_experiments.vm.qemu`);
the host talks to it with one JSON request per line (:meth:`RouterVM.call`).

The guest's clock is not the host's: :meth:`RouterVM.sync_clock` measures
the offset as the midpoint of the fastest of several round trips (the error
is at most half that round trip, recorded as ``offset_error_s``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from nest_experiments.errors import NestExpError, NetworkSetupError, VMError
from nest_experiments.net.routed import calibrate
from nest_experiments.net.router_agent import PORT_NAME
from nest_experiments.vm.hostload import HostLoad, annotate
from nest_experiments.vm.image import cache_dir
from nest_experiments.vm.qemu import VMResult, clean_stale, run_in_vm

#: Seconds the guest may take to boot and answer (TCG: 10-38 s boots, the agent's Python start on top).
READY_TIMEOUT_S = 300.0
#: Seconds one request may take.
CALL_TIMEOUT_S = 30.0
#: virtio-net with no offloads either way: a qdisc must see packets, never super-packets (DESIGN §2b).
NIC_OPTIONS = ("csum=off", "guest_csum=off", "gso=off", "guest_tso4=off", "guest_tso6=off", "guest_ecn=off",
               "guest_ufo=off", "host_tso4=off", "host_tso6=off", "host_ecn=off", "host_ufo=off", "mrg_rxbuf=off")
CLOCK_ROUNDS = 9
MAX_SLOTS = 8


def router_priority(setting: str | None = None) -> int:
    """The ``SCHED_FIFO`` priority of the router guest's qemu on the host (0: the normal scheduler).

    The guest is the wire: every packet of a routed link waits for qemu's
    vCPU and I/O threads to be scheduled, twice per crossing. Under the
    normal scheduler they queue behind the run's applications, and the path's
    tail grows with the host's load. Measured on this project's machine
    (``ping -i 0.01`` through the guest's two links, 2000 per slot, RTT ms
    p50 / p99 / max; ``bench/router_path.py --load``): idle 1.16 / 2.47 / 6.7
    normal, 1.01 / 1.95 / 14.4 at FIFO 1; beside two busy loops 1.44 / 41.9 /
    63.6 against 0.87 / 1.66 / 95.2; beside four 1.59 / 12.8 / 28.2 against
    0.96 / 1.80 / 7.7. (Nice -10 instead: 1.04 / 5.06 / 31.5 beside two; host
    wakers or the guest's ``idle=poll`` made it worse: p99 5.5 and 9.4 idle.) With as many vCPUs as host CPUs
    at FIFO the guest starved the host (2 of 2: the agent never answered), so :class:`RouterVM` refuses that.
    qemu's work is bounded by the packets and timers of the links (~0.45 of
    a CPU per 5 Mbit/s pipe, :data:`nest_experiments.net.routed.ROUTED_RATE_LIMIT_BPS`
    caps the sum), and the kernel's real-time throttling keeps 5 % of each CPU
    for the rest; what the applications lose to it the guard's machine rule
    reports. ``NEST_EXP_ROUTER_FIFO``: 0 turns it off, 1-99 sets the priority; default 1.
    """
    value = (setting if setting is not None else os.environ.get("NEST_EXP_ROUTER_FIFO", "1")).strip().lower()
    if value in ("0", "off", "no", "false"):
        return 0
    priority = int(value) if value.isdigit() else -1
    if not 1 <= priority <= 99:
        raise VMError(f"NEST_EXP_ROUTER_FIFO={value!r}: use 0 (off) or a SCHED_FIFO priority from 1 to 99")
    return priority


@dataclass(frozen=True)
class Slot:
    """One link's NIC pair: the TAPs' names on the host and the NICs' MAC addresses."""

    slot: int
    tap_a: str
    tap_b: str
    mac_a: str
    mac_b: str


def plan_slots(count: int, tag: str) -> list[Slot]:
    """``count`` slots; TAP names ``nxr<k>a<tag>`` / ``nxr<k>b<tag>`` (``tag``: 4 hex digits, unique per router)."""
    if not 1 <= count <= MAX_SLOTS:
        raise VMError(f"the router guest carries 1 to {MAX_SLOTS} links, not {count}")
    return [Slot(k, f"nxr{k}a{tag}", f"nxr{k}b{tag}", f"52:54:00:6e:{k:02x}:0a", f"52:54:00:6e:{k:02x}:0b")
            for k in range(count)]


def qemu_devices(slots: Sequence[Slot], socket_path: Path) -> list[str]:
    """qemu arguments: a TAP-backed virtio-net NIC per link end, and the control port."""
    out: list[str] = []
    for s in slots:
        for side, tap, mac in (("a", s.tap_a, s.mac_a), ("b", s.tap_b, s.mac_b)):
            netdev = f"n{s.slot}{side}"
            out += ["-netdev", f"tap,id={netdev},ifname={tap},script=no,downscript=no,vhost=off",
                    "-device", ",".join(["virtio-net-pci", f"netdev={netdev}", f"mac={mac}", *NIC_OPTIONS])]
    out += ["-device", "virtio-serial-pci",
            "-chardev", f"socket,id=nestctl,path={socket_path},server=on,wait=off",
            "-device", f"virtserialport,chardev=nestctl,name={PORT_NAME}"]
    return out


def agent_spec(slots: Sequence[Slot]) -> str:
    return json.dumps({"port": PORT_NAME, "mtu": 1500,
                       "slots": [{"slot": s.slot, "mac_a": s.mac_a, "mac_b": s.mac_b} for s in slots]})


def best_offset(rounds: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """(guest - host offset, its error bound) from (host send, guest time, host receive) round trips: the
    fastest round trip's midpoint."""
    t0, tg, t1 = min(rounds, key=lambda r: r[2] - r[0])
    return tg - (t0 + t1) / 2, (t1 - t0) / 2


class RouterVM:
    """The router guest for a sweep. Use as a context manager; see the module's docstring."""

    def __init__(self, *, slots: int, missing: frozenset[str], console: TextIO | None = sys.stderr,
                 memory_mb: int = 512, cpus: int = 1, fifo: int | None = None) -> None:
        self._missing = frozenset(missing)
        self.slots = plan_slots(slots, f"{os.getpid() % 0x10000:04x}")
        self.console = console
        self.memory_mb, self.cpus = memory_mb, cpus
        self.fifo = router_priority() if fifo is None else fifo
        if self.fifo and cpus >= (os.cpu_count() or 1):
            # measured: 2 vCPUs at FIFO 1 on this project's 2-core machine, the agent never answered (300 s)
            raise VMError(f"the router guest at SCHED_FIFO needs fewer vCPUs ({cpus}) than host CPUs "
                          f"({os.cpu_count()}): its vCPU threads would starve the host; use NEST_EXP_ROUTER_FIFO=0")
        self.offset_s = 0.0
        self.offset_error_s = float("nan")
        self.boot_s = 0.0
        self.path: dict[str, Any] = {}  # the guest path's round trip, calibrated at the start (net.routed.calibrate)
        self._dir: Path | None = None
        self._sock: socket.socket | None = None
        self._buf = b""
        self._next_id = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: VMResult | None = None
        self._error: BaseException | None = None
        self._load: HostLoad | None = None

    # ------------------------------------------------------------ the Router protocol (net.routed)

    @property
    def missing(self) -> frozenset[str]:
        return self._missing

    @property
    def taps(self) -> tuple[tuple[str, str], ...]:
        return tuple((s.tap_a, s.tap_b) for s in self.slots)

    @property
    def pid(self) -> int | None:
        return self._load.pid if self._load is not None else None

    def host_time(self, t_guest: float) -> float:
        return t_guest - self.offset_s

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """One request; the agent's answer, or :class:`NetworkSetupError` with its error."""
        with self._lock:
            answer = self._request({"op": op, **args}, timeout_s=CALL_TIMEOUT_S)
        if not answer.get("ok"):
            raise NetworkSetupError(f"router guest: {op}: {answer.get('error', 'failed')}")
        return answer

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> RouterVM:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        folder = cache_dir() / "router"
        folder.mkdir(parents=True, exist_ok=True)
        clean_stale(folder)
        self._dir = folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._dir.mkdir(mode=0o700)
        sock_path = self._dir / "ctl.sock"
        started = threading.Event()

        def on_started(load: HostLoad) -> None:
            self._load = load
            started.set()

        def boot() -> None:
            try:
                self._result = run_in_vm([sys.executable, "-m", "nest_experiments.net.router_agent",
                                          agent_spec(self.slots)], cwd=Path("/"), rw_dirs=[], env={},
                                         timeout_s=14 * 24 * 3600.0, console=self.console, memory_mb=self.memory_mb,
                                         cpus=self.cpus, keep_host_awake=False, on_started=on_started,
                                         devices=qemu_devices(self.slots, sock_path), host_fifo=self.fifo)
            except BaseException as exc:  # reported by start() / close()
                self._error = exc
            finally:
                started.set()

        t0 = time.monotonic()
        self._thread = threading.Thread(target=boot, name="router-vm", daemon=True)
        self._thread.start()
        self._connect(sock_path, started, t0)
        self.boot_s = round(time.monotonic() - t0, 3)
        self.sync_clock()
        self.path = calibrate(self)

    def _failed(self, what: str) -> VMError:
        if self._error is not None:
            return VMError(f"router guest: {what}: {self._error}")
        return VMError(f"router guest: {what}")

    def _connect(self, path: Path, started: threading.Event, t0: float) -> None:
        deadline = t0 + READY_TIMEOUT_S
        while not path.exists():
            if self._error is not None or (self._thread is not None and not self._thread.is_alive()):
                raise self._failed("qemu exited before its control port existed")
            if time.monotonic() > deadline:
                raise self._failed(f"no control port after {READY_TIMEOUT_S:g} s")
            time.sleep(0.05)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(str(path))
        while True:  # the agent answers once the guest has booted and bridged the NICs
            if self._error is not None or (self._thread is not None and not self._thread.is_alive()):
                raise self._failed("the guest stopped before its agent answered (its console says why)")
            if time.monotonic() > deadline:
                raise self._failed(f"the agent did not answer within {READY_TIMEOUT_S:g} s")
            try:
                answer = self._request({"op": "time"}, timeout_s=2.0)
            except TimeoutError:
                continue
            if answer.get("ok"):
                return

    def _request(self, req: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        assert self._sock is not None
        self._next_id += 1
        want = self._next_id
        self._sock.sendall((json.dumps({**req, "id": want}) + "\n").encode())
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == want:
                    return dict(answer)  # an older id: the answer to a poll that timed out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"router guest: no answer to {req.get('op')} within {timeout_s:g} s")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(1 << 16)
            except TimeoutError:
                raise TimeoutError(f"router guest: no answer to {req.get('op')} within {timeout_s:g} s") from None
            if not chunk:
                raise self._failed("its control port closed")
            self._buf += chunk

    def sync_clock(self) -> tuple[float, float]:
        """Measure the guest's clock offset (:func:`best_offset` over :data:`CLOCK_ROUNDS` round trips)."""
        rounds = []
        with self._lock:
            for _ in range(CLOCK_ROUNDS):
                t0 = time.monotonic()
                answer = self._request({"op": "time"}, timeout_s=CALL_TIMEOUT_S)
                rounds.append((t0, float(answer["t"]), time.monotonic()))
        self.offset_s, self.offset_error_s = best_offset(rounds)
        return self.offset_s, self.offset_error_s

    def close(self) -> None:
        """Ask the agent to quit (the guest powers off); kill qemu when it does not; remove the folder."""
        if self._sock is not None:
            try:
                with self._lock:
                    self._request({"op": "quit"}, timeout_s=10.0)
            except (OSError, TimeoutError, NestExpError, ValueError):
                pass
            self._sock.close()
            self._sock = None
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            if self._thread.is_alive() and self._load is not None:
                try:
                    os.killpg(self._load.pid, 9)  # qemu runs in its own process group (vm.qemu)
                except ProcessLookupError:
                    pass
                self._thread.join(timeout=15.0)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def annotate(self, manifest: dict[str, Any]) -> None:
        """The run's manifest gets the host's steal over its traffic and qemu's threads as a rule of the CPU guard
        (per thread: a vCPU at one CPU is saturated, qemu's threads together above one CPU are not), as the VM
        runtime's do (vm.hostload.annotate)."""
        if self._load is not None:
            annotate(manifest, list(self._load.samples))

    def summary(self) -> dict[str, Any]:
        """For the manifest: the guest's boot, its clock offset and the qemu process."""
        return {"slots": len(self.slots), "boot_s": self.boot_s, "clock_offset_s": round(self.offset_s, 6),
                "clock_offset_error_s": round(self.offset_error_s, 6), "qemu_pid": self.pid,
                "memory_mb": self.memory_mb, "vcpus": self.cpus, "host_fifo": self.fifo, "path_rtt": self.path}
