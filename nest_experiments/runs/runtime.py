"""Where runs execute: the host or the VM runtime; choosing one, and entering the VM.

The VM runtime runs the same command inside a guest whose environment says
so (:data:`ENV`): :func:`current` is the one place that reads it. Choosing
(:func:`choose`) probes the host kernel's features; entering
(:func:`enter_vm`) starts the VM with the guest's environment.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import KernelFeatureError
from nest_experiments.net.kernel import FEATURES, missing_on_host, probe_feature, require_host_features
from nest_experiments.net.routed import ROUTABLE, Router, routed_count, unroutable

if TYPE_CHECKING:
    from nest_experiments.vm.hostload import HostLoad
    from nest_experiments.vm.qemu import VMResult

ENV = "NEST_EXP_RUNTIME"  # "vm" inside the VM runtime's guest
VM_ENV_PREFIX = "NEST_EXP_VM_"  # the VM's settings, as the host chose them (vm.qemu.VMSettings.guest_env)
RUNTIMES = ("auto", "host", "router", "vm")


def current() -> str:
    """``"vm"`` inside the VM runtime's guest, else ``"host"``."""
    return "vm" if os.environ.get(ENV) == "vm" else "host"


def vm_settings() -> dict[str, str]:
    """Inside the guest: the VM's settings (accel, host_awake, softirq_fifo, warmup_s) for the manifest; else {}."""
    if current() != "vm":
        return {}
    return {k.removeprefix(VM_ENV_PREFIX).lower(): v for k, v in os.environ.items() if k.startswith(VM_ENV_PREFIX)}


def warmup_s() -> float:
    """Inside the guest: how long the warm-up before the first run lasts (vm.qemu.warmup_s); on the host 0, and 0
    in a guest process that has warmed up already (:func:`note_warm`)."""
    return float(vm_settings().get("warmup_s", "0"))


def note_warm() -> None:
    """A warm-up ran in this (guest) process: its later sweeps (the next blocks of ``--until-decided``,
    runs.blocks_in_vm) need none, and their manifests say so (``vm.warmup_s`` 0)."""
    if current() == "vm":
        os.environ[VM_ENV_PREFIX + "WARMUP_S"] = "0"


def guest_env(settings: Mapping[str, str], *, keep: Sequence[str] = ()) -> dict[str, str]:
    """The guest's environment: it is the VM runtime, with the VM's ``settings``, writing no byte code (the
    project is read-only there), and the host's variables named in ``keep``."""
    kept = {k: os.environ[k] for k in keep if k in os.environ}
    return {ENV: "vm", **kept, **settings, "PYTHONDONTWRITEBYTECODE": "1"}


def choose(wanted: str, runs: Sequence[RunSpec]) -> str:
    """``"host"``, ``"router"`` or ``"vm"`` for ``runs``: ``wanted`` (auto, host, router, vm). auto picks the
    host when its kernel has every feature the runs need, the router runtime (apps on the host, the links that
    need a missing qdisc through one guest: vm.router) when what it lacks are qdiscs the guest has, else the VM
    runtime (the whole experiment in the guest). A wanted host or router that cannot serve the runs raises,
    naming the key. Inside the VM runtime's guest: the host."""
    if current() == "vm":
        return "host"  # we are the guest
    missing = {f: key for r in runs for f, key in missing_on_host(r.experiment).items()}
    if wanted == "auto":
        if not missing:
            return "host"
        return "vm" if unroutable(missing) else "router"
    if wanted == "host":
        for r in runs:
            require_host_features(r.experiment)
    if wanted == "router" and unroutable(missing):
        feature, key = next(iter(unroutable(missing).items()))
        raise KernelFeatureError(f"{key}: this kernel has no '{feature}' ({FEATURES[feature][1]}) and the router "
                                 "runtime only adds qdiscs on links: use --runtime vm (the whole experiment in a VM)")
    return wanted


def router_plan(runs: Sequence[RunSpec]) -> tuple[frozenset[str], int]:
    """For the router runtime: the features the host lacks (what the guest provides) and the most links one run
    sends through the guest (its slots)."""
    missing = frozenset(f for r in runs for f in missing_on_host(r.experiment))
    return missing, max((routed_count(r.experiment.links, missing) for r in runs), default=0)


def missing_summary(runs: Sequence[RunSpec]) -> str:
    """What the host kernel lacks for ``runs``, comma-separated ('' when nothing)."""
    return ", ".join(sorted({f for r in runs for f in missing_on_host(r.experiment)}))


@contextlib.contextmanager
def router_guest(*, slots: int, missing: frozenset[str]) -> Iterator[Router]:
    """The router runtime's guest (vm.router) with ``slots`` links and what the host lacks (``missing``), booted
    now and shut down whatever happens; it says so on stderr."""
    from nest_experiments.vm.router import RouterVM

    print(f"router runtime: the apps on the host, {slots} link(s) per run through one guest for what this kernel "
          f"lacks ({', '.join(sorted(missing))})", file=sys.stderr, flush=True)
    with RouterVM(slots=slots, missing=missing) as guest:
        print(f"router runtime: guest up in {guest.boot_s:.1f} s (clock offset known to "
              f"{guest.offset_error_s * 1e3:.2f} ms)", file=sys.stderr, flush=True)
        yield guest


def routable_missing() -> frozenset[str]:
    """The features the host lacks that the router guest has (net.routed.ROUTABLE): what a guest gives a link."""
    return frozenset(f for f in ROUTABLE if not probe_feature(f).ok)


def enter_vm(argv: list[str], *, rw_dirs: list[Path], timeout_s: float, keep_env: Sequence[str] = (),
             extra_env: Mapping[str, str] | None = None,
             on_started: Callable[[HostLoad], None] | None = None) -> VMResult:
    """Run ``argv`` in one VM (this working directory, ``rw_dirs`` writable) with the guest's environment
    (plus ``extra_env``); ``on_started`` gets the host's load sampler as qemu starts (vm.hostload)."""
    from nest_experiments.vm import run_in_vm
    from nest_experiments.vm import vm_settings as host_vm_settings

    vm = host_vm_settings()
    env = {**guest_env(vm.guest_env(), keep=keep_env), **(extra_env or {})}
    return run_in_vm(argv, cwd=Path.cwd(), rw_dirs=rw_dirs, env=env,
                     timeout_s=timeout_s, accel=vm.accel, keep_host_awake=vm.host_awake, softirq_fifo=vm.softirq_fifo,
                     on_started=on_started)
