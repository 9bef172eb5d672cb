"""Boot the guest image with qemu and run one command in it.

The guest sees the host's root file system read-only over 9p, the directories
in ``rw_dirs`` writable at the same absolute paths, and nothing of the host's
network (``-nic none``). The command, its working directory and environment go
to the guest as a JSON file in a private run share; no shell string is ever
built from them. qemu runs in its own process group with ``PR_SET_PDEATHSIG``
set to SIGKILL and is killed on timeout, exceptions, KeyboardInterrupt and
SIGTERM; the per-run folder is always removed.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from nest_experiments.errors import Interrupted, VMError
from nest_experiments.vm.hostload import HostLoad, HostSample
from nest_experiments.vm.image import MSIZE, VMImage, cache_dir, ensure_image

QEMU = "qemu-system-x86_64"
MARKER = "@@nestvm:"
KERNEL_CMDLINE = ("console=ttyS0", "panic=-1", "quiet", "loglevel=3", "mitigations=off",
                  "random.trust_cpu=on", "8250.nr_uarts=1")
#: Host CPU flags under which the guest may trust its TSC (see :func:`guest_clock_params`).
INVARIANT_TSC = frozenset({"constant_tsc", "nonstop_tsc"})
#: Seconds a KVM probe boot may take before KVM is declared broken on this host.
KVM_PROBE_TIMEOUT_S = 20.0
#: Paths the guest cannot see on the shared root (its own tmpfs/procfs is mounted there).
GUEST_PRIVATE = (Path("/tmp"), Path("/run"), Path("/proc"), Path("/sys"), Path("/dev"))

PR_SET_PDEATHSIG = 1
#: What each waker runs: a busy loop, at SCHED_IDLE (see :func:`host_awake`).
_WAKER = "while True: pass"


def guest_private_root(path: Path) -> Path | None:
    """The folder of :data:`GUEST_PRIVATE` that holds ``path`` (the guest has its own there), or None."""
    return next((g for g in GUEST_PRIVATE if path == g or g in path.parents), None)


class VMTimeoutError(VMError):
    """The guest did not finish within the timeout; qemu was killed."""


@dataclass(frozen=True)
class VMResult:
    """Outcome of :func:`run_in_vm`."""

    exit_code: int
    accel: str
    guest_kernel: str
    boot_s: float
    wall_s: float
    host_samples: tuple[HostSample, ...] = ()  # the host's steal and qemu's CPU, once a second (vm.hostload)
    poweroff_s: float = 0.0  # from the guest command's end (synced) to qemu's exit
    setup_s: float = 0.0  # before qemu starts: the image made or found, the accelerator probed or read from its cache


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of :func:`probe` (for ``doctor``)."""

    ok: bool
    reason: str
    accel: str
    boot_s: float
    guest_kernel: str
    qdiscs: tuple[tuple[str, bool], ...] = ()


# --------------------------------------------------------------------------- pure parts


def _qemu_opt(value: str) -> str:
    """Escape a value for a qemu ``-opt key=value,...`` list (commas are doubled)."""
    return value.replace(",", ",,")


def qemu_argv(
    *,
    image: VMImage,
    accel: str,
    shares: Sequence[tuple[str, Path, bool]],
    memory_mb: int = 2048,
    cpus: int = 2,
    qemu: str = QEMU,
    cmdline: Sequence[str] = (),
    devices: Sequence[str] = (),
) -> list[str]:
    """The qemu command line. ``shares`` are ``(mount tag, host path, read_only)``; ``cmdline``: more kernel
    parameters; ``devices``: more qemu arguments (the router runtime's NICs and control port: vm.router)."""
    if accel not in ("kvm", "tcg"):
        raise VMError(f"unknown accelerator {accel!r} (use auto, kvm or tcg)")
    argv = [
        qemu, "-name", "nestvm",
        "-accel", "kvm" if accel == "kvm" else "tcg,thread=multi",
        "-cpu", "host" if accel == "kvm" else "max",
        "-m", str(int(memory_mb)), "-smp", str(int(cpus)),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", " ".join([*KERNEL_CMDLINE, *cmdline]),
        "-nographic", "-monitor", "none", "-no-reboot", "-nic", "none",
        "-device", "virtio-rng-pci",
    ]
    for tag, path, read_only in shares:
        opts = f"local,path={_qemu_opt(str(path))},mount_tag={tag},security_model=passthrough,multidevs=remap"
        if read_only:
            opts += ",readonly=on"
        argv += ["-virtfs", opts]
    return argv + list(devices)


def _mount_order(rw_dirs: Sequence[Path]) -> list[tuple[str, Path]]:
    """Mount tags ``rw0``, ``rw1``, ... with parents before children."""
    ordered = sorted(rw_dirs, key=lambda p: (len(p.parts), str(p)))
    return [(f"rw{i}", p) for i, p in enumerate(ordered)]


def run_spec(*, argv: Sequence[str], cwd: Path, env: Mapping[str, str], rw_dirs: Sequence[Path],
             softirq_fifo: int = 0) -> dict[str, object]:
    """The JSON document the guest helper reads (mount tags ``rw0``, ``rw1``, ... in mount order)."""
    full_env = dict(env)
    full_env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return {
        "argv": list(argv),
        "cwd": str(cwd),
        "env": full_env,
        "mounts": [{"tag": tag, "path": str(path)} for tag, path in _mount_order(rw_dirs)],
        "msize": MSIZE,
        "softirq_fifo": softirq_fifo,
    }


def _validate(argv: Sequence[str], cwd: Path, rw_dirs: Sequence[Path], env: Mapping[str, str]) -> list[Path]:
    if not argv or not all(isinstance(a, str) for a in argv):
        raise VMError("run_in_vm: argv must be a non-empty list of strings")
    if any("\0" in a for a in argv) or any("\0" in k + v for k, v in env.items()):
        raise VMError("run_in_vm: argv and env must not contain NUL characters")
    if not Path(cwd).is_absolute():
        raise VMError(f"run_in_vm: cwd must be an absolute path, got {cwd}")
    dirs: list[Path] = []
    for d in rw_dirs:
        p = Path(d)
        if not p.is_absolute() or not p.is_dir():
            raise VMError(f"run_in_vm: writable directory {d} must be an existing absolute directory")
        dirs.append(p.resolve())
    if len(set(dirs)) != len(dirs):
        raise VMError("run_in_vm: rw_dirs lists a directory twice")
    here = Path(cwd).resolve()
    g = guest_private_root(here)
    if g is not None and not any(d == here or d in here.parents for d in dirs):
        raise VMError(f"run_in_vm: the working directory {cwd} is under {g}, which the guest has its own of: "
                          "run from a directory elsewhere (a project clone under /tmp cannot use the VM runtime)")
    return dirs


def _guest_python(explicit: str | None) -> str:
    candidates = [explicit] if explicit else [sys.executable, "/usr/bin/python3"]
    for c in candidates:
        if not c or "\n" in c:
            continue
        p = Path(c)
        if p.is_absolute() and p.exists() and guest_private_root(p) is None:
            return c
    raise VMError("no python usable inside the guest (it must live on the host root, not under /tmp or /run): "
                  "apt-get install python3")


# --------------------------------------------------------------------------- process handling


_libc: ctypes.CDLL | None = None


def _prctl() -> Callable[..., int]:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.prctl  # type: ignore[no-any-return]


def _make_preexec(fifo: int = 0) -> Callable[[], None]:
    """preexec_fn for qemu: die with SIGKILL when the parent dies (even by kill -9); with ``fifo`` (1-99) run at
    that ``SCHED_FIFO`` priority (every thread qemu starts inherits it)."""
    prctl = _prctl()  # resolved before the fork
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
        if fifo:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo))

    return preexec


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM raises Interrupted, unless the caller installed its own handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: types.FrameType | None) -> None:
        raise Interrupted("interrupted by SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _kill(proc: subprocess.Popen[bytes], what: str = "qemu") -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # pgid == pid (process_group=0); not reaped yet
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired as exc:
        raise VMError(f"{what} (pid {proc.pid}) did not die after SIGKILL") from exc


class _Console(threading.Thread):
    """Reads qemu's stdout (the guest's serial console), forwards it, and watches markers.

    Firmware and kernel boot output (before the init marker) and the power-off
    message (after the done marker) are not forwarded, only kept for error messages.
    """

    def __init__(self, stream: io.BufferedReader, out: TextIO | None, t0: float) -> None:
        super().__init__(name="nestvm-console", daemon=True)
        self.stream = stream
        self.out = out
        self.t0 = t0
        self.phase = "boot"
        self.started_at: float | None = None
        self.done_at: float | None = None  # the guest command's end (its exit status written, synced)
        self.errors: list[str] = []
        self.tail: list[str] = []

    def _marker(self, what: str) -> None:
        if what == "init":
            self.phase = "init"
        elif what == "start":
            self.phase = "run"
            if self.started_at is None:
                self.started_at = time.monotonic() - self.t0
        elif what == "done":
            self.phase = "done"
            self.done_at = time.monotonic() - self.t0
        elif what.startswith("error"):
            self.errors.append(what[len("error"):].strip())

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").replace("\r", "")
            at = line.find(MARKER)
            if at >= 0 and self.phase != "run":
                self._marker(line[at + len(MARKER):].strip())
                continue
            if at >= 0 and line[at + len(MARKER):].strip() == "done":
                self._marker("done")
                continue
            stripped = line.strip()
            if stripped:
                self.tail = (self.tail + [stripped])[-20:]
            if self.out is not None and self.phase in ("init", "run"):
                try:
                    self.out.write(line)
                    self.out.flush()
                except (OSError, ValueError):
                    self.out = None


def clean_stale(folder: Path) -> None:
    """Remove the entries ``<pid>-...`` of ``folder`` whose process no longer exists (left by kill -9)."""
    if not folder.is_dir():
        return
    for d in folder.iterdir():
        pid_s = d.name.split("-", 1)[0]
        if not pid_s.isdigit() or int(pid_s) == os.getpid():
            continue
        try:
            os.kill(int(pid_s), 0)
        except ProcessLookupError:
            if d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink(missing_ok=True)
        except PermissionError:
            pass


# --------------------------------------------------------------------------- accelerator


def _accel_cache_file(root: Path | None) -> Path:
    return cache_dir(root) / "accel.json"


def _read_accel_cache(root: Path | None) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(_accel_cache_file(root).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def resolve_accel(accel: str = "auto", *, root: Path | None = None, image: VMImage | None = None,
                  console: TextIO | None = None) -> tuple[str, str]:
    """Return ``(accelerator, reason)``. ``auto`` probes KVM once per host kernel and caches the verdict."""
    if accel == "tcg":
        return "tcg", "requested"
    kvm_ok = os.access("/dev/kvm", os.R_OK | os.W_OK)
    if accel == "kvm":
        if not kvm_ok:
            raise VMError("accel kvm requested but /dev/kvm is missing or not accessible")
        return "kvm", "requested"
    if accel != "auto":
        raise VMError(f"unknown accelerator {accel!r} (use auto, kvm or tcg)")
    if not kvm_ok:
        return "tcg", "/dev/kvm not available"
    release = platform.release()
    cached = _read_accel_cache(root).get(release)
    if cached and cached.get("accel") in ("kvm", "tcg"):
        return cached["accel"], cached.get("reason", "cached")
    # Probe: a trivial command under KVM with a short timeout.
    try:
        run_in_vm(["true"], cwd=Path("/"), rw_dirs=[], env={}, timeout_s=KVM_PROBE_TIMEOUT_S, accel="kvm",
                  console=None, root=root, image=image)
        verdict, reason = "kvm", "KVM probe boot succeeded"
    except VMTimeoutError:
        verdict, reason = "tcg", f"KVM probe boot hung (> {KVM_PROBE_TIMEOUT_S:.0f} s); using TCG"
    except VMError as exc:
        verdict, reason = "tcg", f"KVM probe boot failed ({exc}); using TCG"
    if console is not None:
        console.write(f"vm: {reason}\n")
    data = _read_accel_cache(root)
    data[release] = {"accel": verdict, "reason": reason,
                     "checked": datetime.now(UTC).isoformat(timespec="seconds")}
    path = _accel_cache_file(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".accel.json.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return verdict, reason


# --------------------------------------------------------------------------- host wakers


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The host CPU's flags (``/proc/cpuinfo``; those of its first CPU)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def host_is_virtual(cpuinfo: str | None = None) -> bool:
    """True when this host is itself a virtual machine (the CPU's ``hypervisor`` flag)."""
    return "hypervisor" in cpu_flags(cpuinfo)


def guest_clock_params(accel: str, cpuinfo: str | None = None) -> list[str]:
    """Kernel parameters that give a TCG guest the TSC as its clock, when the host's TSC is invariant.

    Under TCG the guest's TSC is the host's, but the guest kernel's check
    finds the vCPUs' TSCs "unsynchronized" and falls back to the emulated
    HPET: then every clock read, by the kernel (packet and qdisc time
    stamps, timers) and by every application, is a trap into qemu's HPET
    model. Measured in the guest on this project's machine: 2.2 us per
    ``clock_gettime`` on the HPET against 0.17 us on the TSC. The default
    NeST run (FQ-PIE 5 ms, 2 interleaved A/B pairs): httperf answered
    98-100% of its requests with the TSC and 48-89% with the HPET; FQ-PIE's
    measured delay was 15.4-17.0 ms against 18.1-20.3, SIPp's call set-up
    68-93 ms against 88-106. ``tsc=reliable`` is only safe when the host's
    TSC ticks at a constant rate, also in idle states (``constant_tsc``,
    ``nonstop_tsc``); otherwise the guest keeps the HPET. KVM guests have
    kvm-clock and need nothing.
    """
    if accel != "tcg" or not INVARIANT_TSC <= cpu_flags(cpuinfo):
        return []
    return ["tsc=reliable"]


def host_awake(setting: str | None = None) -> bool:
    """Whether :func:`run_in_vm` keeps the host's CPUs awake (``NEST_EXP_HOST_AWAKE``: 1, 0 or auto).

    When the host is itself a VM, an idle host CPU halts and the hypervisor
    takes its time to wake it; every wakeup of qemu's vCPU and timer threads
    pays that, so the guest's timers (HTB's watchdog among them) fire late: on
    this kind of machine a 10 Mbit/s link with captures in the guest carried
    5.6-7.7 Mbit/s, while the hypervisor reported ~20% steal at 0.7 CPU used.
    A busy loop per host CPU at ``SCHED_IDLE`` keeps the CPUs from halting;
    any other thread that wakes preempts it at once. Measured: 7.1-8.7
    Mbit/s with it (docs/runtimes.md). ``auto`` (the default): on when the host is
    virtual.
    """
    value = (setting if setting is not None else os.environ.get("NEST_EXP_HOST_AWAKE", "auto")).strip().lower()
    if value in ("1", "on", "yes", "true"):
        return True
    if value in ("0", "off", "no", "false"):
        return False
    if value != "auto":
        raise VMError(f"NEST_EXP_HOST_AWAKE={value!r}: use 1, 0 or auto")
    return host_is_virtual()


def softirq_priority(setting: str | None = None) -> int:
    """The ``SCHED_FIFO`` priority the guest gives its ``ksoftirqd`` threads (0: the kernel's default).

    On a real testbed each router has its own CPU; in the guest, the
    routers' forwarding and qdiscs run as the kernel's softirq work on the
    same two vCPUs as the traffic tools. Once that work is deferred to
    ``ksoftirqd`` (under load, most of it is), it competes with a dozen
    applications for a fair share, and HTB dequeues late: PIE's delay rises
    and the link idles. At real-time priority the forwarding runs first. The
    default NeST run, interleaved A/B on this project's machine: PIE's delay
    (bn1 / bn2, 5 ms target, 2 pairs) 5.6-6.2 / 6.2-6.6 ms with it, 6.9-7.8 /
    8.0-12.1 ms without, and iperf3 moved 10-21% more bytes. The applications
    get what the forwarding leaves (the kernel keeps 5% for them): the
    manifest's CPU warning says when that was too little. ``NEST_EXP_SOFTIRQ_FIFO``: 0
    turns it off, 1-99 sets the priority; default 1.
    """
    value = (setting if setting is not None else os.environ.get("NEST_EXP_SOFTIRQ_FIFO", "1")).strip().lower()
    if value in ("0", "off", "no", "false"):
        return 0
    priority = int(value) if value.isdigit() else -1
    if not 1 <= priority <= 99:
        raise VMError(f"NEST_EXP_SOFTIRQ_FIFO={value!r}: use 0 (off) or a SCHED_FIFO priority from 1 to 99")
    return priority


@dataclass(frozen=True)
class VMSettings:
    """How the VM runtime runs this time, resolved once on the host (see :func:`vm_settings`)."""

    accel: str
    host_awake: bool
    softirq_fifo: int
    warmup_s: float = 0.0

    def guest_env(self) -> dict[str, str]:
        """Environment for the guest: its runner writes these into each manifest's ``vm``."""
        return {"NEST_EXP_VM_ACCEL": self.accel, "NEST_EXP_VM_HOST_AWAKE": str(int(self.host_awake)),
                "NEST_EXP_VM_SOFTIRQ_FIFO": str(self.softirq_fifo), "NEST_EXP_VM_WARMUP_S": f"{self.warmup_s:g}"}


def vm_settings() -> VMSettings:
    """The accelerator, the host wakers, the guest's softirq priority and its warm-up, from the machine and
    the environment."""
    accel, _ = resolve_accel("auto")
    return VMSettings(accel=accel, host_awake=host_awake(), softirq_fifo=softirq_priority(), warmup_s=warmup_s())


def warmup_s(setting: str | None = None) -> float:
    """Seconds of unmeasured traffic the guest runs before the first run of its sweep (0: none).

    A freshly booted guest is slow at first: under TCG every guest code path
    (the kernel's forwarding and qdiscs, each tool, the interpreter) is
    translated into host code the first time it runs, and every file comes
    over 9p into a cold page cache (qemu's memory grows from 0.2 to 1.7 GB in
    a VM's first ~3.5 minutes). Four runs of one cell in one VM, without a
    warm-up and before the project was byte-compiled on the host: PIE's delay
    on bn1 was 7.9, 6.0, 5.4 and 5.0 ms at a 5 ms target, in that order; with
    both (bench/warmup_bias.py), the first run's figures were within the
    spread of the other three (|z| <= 0.84 for CPU, bottleneck use, iperf3
    and PIE's delay / target: 1.23 against 1.29 +- 0.08). The warm-up is the
    sweep's first run, shortened to this length, into a folder that is thrown
    away. ``NEST_EXP_WARMUP``: seconds (``30s`` or ``30``), 0 turns it off;
    default 30.
    """
    value = (setting if setting is not None else os.environ.get("NEST_EXP_WARMUP", "30")).strip().lower()
    if value in ("0", "off", "no", "false"):
        return 0.0
    try:
        seconds = float(value.removesuffix("s"))
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 600:
        raise VMError(f"NEST_EXP_WARMUP={value!r}: use seconds of warm-up from 0 (off) to 600, e.g. 30")
    return seconds


def _make_waker_preexec() -> Callable[[], None]:
    die_with_parent = _make_preexec()

    def preexec() -> None:
        die_with_parent()
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    return preexec


def _start_wakers(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy loops at SCHED_IDLE that die with this process (see :func:`host_awake`)."""
    return [subprocess.Popen([sys.executable, "-S", "-c", _WAKER], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0,
                             preexec_fn=_make_waker_preexec(), close_fds=True)
            for _ in range(count)]


# --------------------------------------------------------------------------- running


def run_in_vm(
    argv: list[str],
    *,
    cwd: Path,
    rw_dirs: list[Path],
    env: dict[str, str],
    timeout_s: float,
    accel: str = "auto",
    console: TextIO | None = sys.stderr,
    memory_mb: int = 2048,
    cpus: int = 2,
    python: str | None = None,
    image: VMImage | None = None,
    root: Path | None = None,
    keep_host_awake: bool | None = None,
    softirq_fifo: int | None = None,
    on_started: Callable[[HostLoad], None] | None = None,
    devices: Sequence[str] = (),
    host_fifo: int = 0,
) -> VMResult:
    """Boot the guest, run ``argv`` in ``cwd`` with exactly ``env`` (plus a default PATH), power off.

    ``rw_dirs`` are writable inside the guest at the same absolute paths; the
    rest of the host's root is read-only. The guest console (the command's
    stdout and stderr) is streamed to ``console`` (``None`` discards it).
    Returns the command's exit code (128+N when killed by signal N). Raises
    :class:`VMTimeoutError` after ``timeout_s`` seconds (boot included) and
    :class:`VMError` when the guest cannot be built, booted or report back.
    ``keep_host_awake`` (default :func:`host_awake`): a waker per host CPU
    while qemu runs. ``softirq_fifo`` (default :func:`softirq_priority`):
    the guest's ``ksoftirqd`` threads at that ``SCHED_FIFO`` priority (0: not).
    ``on_started``: given the host's load sampler once qemu runs (its ``samples`` grow while it does).
    ``devices``: more qemu arguments (:func:`qemu_argv`). ``host_fifo`` (1-99): qemu and all its threads at that
    ``SCHED_FIFO`` priority on the host (the router runtime: :func:`nest_experiments.vm.router.router_priority`).
    """
    if not 0 <= host_fifo <= 99:
        raise VMError(f"host_fifo={host_fifo}: use 0 (off) or a SCHED_FIFO priority from 1 to 99")
    t_setup = time.monotonic()
    cwd = Path(cwd)
    awake = host_awake() if keep_host_awake is None else keep_host_awake
    fifo = softirq_priority() if softirq_fifo is None else softirq_fifo
    dirs = _validate(argv, cwd, rw_dirs, env)
    if shutil.which(QEMU) is None:
        raise VMError(f"{QEMU} not found: apt-get install qemu-system-x86")

    def log(message: str) -> None:
        if console is not None:
            console.write(message + "\n")

    img = image or ensure_image(root=root, log=log)
    if accel == "auto":
        acc, _reason = resolve_accel("auto", root=root, image=img, console=console)
    else:
        acc, _reason = resolve_accel(accel, root=root)
    guest_python = _guest_python(python)

    runs = cache_dir(root) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    clean_stale(runs)
    run_dir = runs / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    run_dir.mkdir(mode=0o700)
    proc: subprocess.Popen[bytes] | None = None
    wakers: list[subprocess.Popen[bytes]] = []
    load: HostLoad | None = None
    reader: _Console | None = None
    t0 = time.monotonic()
    try:
        spec = run_spec(argv=argv, cwd=cwd, env=env, rw_dirs=dirs, softirq_fifo=fifo)
        mounts = _mount_order(dirs)
        (run_dir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        (run_dir / "python").write_text(guest_python + "\n", encoding="utf-8")
        shutil.copyfile(Path(__file__).with_name("guest.py"), run_dir / "guest.py")
        shares: list[tuple[str, Path, bool]] = [("host", Path("/"), True), ("nestrun", run_dir, False)]
        shares += [(tag, path, False) for tag, path in mounts]
        cmd = qemu_argv(image=img, accel=acc, shares=shares, memory_mb=memory_mb, cpus=cpus,
                        cmdline=guest_clock_params(acc), devices=devices)
        with _sigterm_raises():
            t0 = time.monotonic()
            setup = t0 - t_setup
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, process_group=0,
                                    preexec_fn=_make_preexec(host_fifo), close_fds=True)
            if awake:
                wakers = _start_wakers(os.cpu_count() or 1)
            load = HostLoad(proc.pid).start()
            if on_started is not None:
                on_started(load)
            assert proc.stdout is not None
            reader = _Console(proc.stdout, console, t0)  # type: ignore[arg-type]
            reader.start()
            try:
                proc.wait(timeout=max(0.0, timeout_s - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise VMTimeoutError(
                    f"guest command {argv[0]} did not finish within {timeout_s:g} s; qemu killed") from None
        wall = time.monotonic() - t0
        reader.join(timeout=5)
        exit_file = run_dir / "exit_code"
        if reader.errors:
            raise VMError(f"guest init failed: {reader.errors[0]}")
        if not exit_file.is_file():
            last = reader.tail[-1] if reader.tail else "no console output"
            raise VMError(f"guest exited (qemu status {proc.returncode}) without reporting an exit code; "
                          f"last console line: {last}")
        try:
            code = int(exit_file.read_text().strip())
        except ValueError as exc:
            raise VMError(f"guest reported an unreadable exit code: {exit_file.read_text()!r}") from exc
        boot = reader.started_at if reader.started_at is not None else wall
        done = reader.done_at if reader.done_at is not None else wall
        return VMResult(exit_code=code, accel=acc, guest_kernel=img.kernel_version,
                        boot_s=round(boot, 3), wall_s=round(wall, 3), host_samples=tuple(load.stop()),
                        poweroff_s=round(wall - done, 3), setup_s=round(setup, 3))
    finally:
        if load is not None:
            load.stop()
        for waker in wakers:
            _kill(waker, "host waker")
        if proc is not None:
            _kill(proc)
            if proc.stdout is not None:
                if reader is not None:
                    reader.join(timeout=5)
                proc.stdout.close()
        shutil.rmtree(run_dir, ignore_errors=True)


# --------------------------------------------------------------------------- probe

#: Guest-side check for ``probe``: one bit per qdisc that could not be installed.
#: A constant script: no value is interpolated into it.
PROBE_QDISCS = ("pie", "fq_pie", "netem")
_PROBE_SCRIPT = """
ip netns add nestvm-probe || exit 64
ip -n nestvm-probe link add va type veth peer name vb || exit 65
ip -n nestvm-probe link set va up && ip -n nestvm-probe link set vb up || exit 66
rc=0
tc -n nestvm-probe qdisc add dev va root pie || rc=$((rc | 1))
tc -n nestvm-probe qdisc add dev vb root fq_pie || rc=$((rc | 2))
tc -n nestvm-probe qdisc replace dev va root netem delay 10ms || rc=$((rc | 4))
tc -n nestvm-probe qdisc show
ip netns del nestvm-probe
exit $rc
"""


def probe(*, accel: str = "auto", timeout_s: float = 180.0, console: TextIO | None = None,
          root: Path | None = None) -> ProbeResult:
    """Boot a guest and check that ``pie``, ``fq_pie`` and ``netem`` can be installed on a veth."""
    sh = "/bin/sh"
    try:
        res = run_in_vm([sh, "-c", _PROBE_SCRIPT], cwd=Path("/"), rw_dirs=[],
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout_s=timeout_s,
                        accel=accel, console=console, root=root)
    except VMError as exc:
        return ProbeResult(ok=False, reason=str(exc), accel=accel, boot_s=0.0, guest_kernel="")
    if res.exit_code >= 64 or res.exit_code not in range(0, 8):
        return ProbeResult(ok=False, reason=f"could not create a veth pair in a guest namespace "
                           f"(exit {res.exit_code}); is iproute2 installed on the host?",
                           accel=res.accel, boot_s=res.boot_s, guest_kernel=res.guest_kernel)
    qdiscs = tuple((q, not res.exit_code & (1 << i)) for i, q in enumerate(PROBE_QDISCS))
    missing = [q for q, ok in qdiscs if not ok]
    reason = "ok" if not missing else f"guest kernel {res.guest_kernel} cannot install: {', '.join(missing)}"
    return ProbeResult(ok=not missing, reason=reason, accel=res.accel, boot_s=res.boot_s,
                       guest_kernel=res.guest_kernel, qdiscs=qdiscs)


__all__ = ["ProbeResult", "VMResult", "VMTimeoutError", "probe", "qemu_argv", "resolve_accel", "run_in_vm",
           "run_spec"]
