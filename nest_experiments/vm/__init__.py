"""VM runtime: run a command inside a small qemu guest booted from a stock Debian kernel.

Used when the host kernel lacks qdiscs the experiments need (pie, fq_pie,
netem, ...). See DESIGN.md §2.3. Public API::

    run_in_vm(argv, *, cwd, rw_dirs, env, timeout_s, accel="auto", console=sys.stderr) -> VMResult
    probe(*, accel="auto", timeout_s=180.0, console=None) -> ProbeResult
    ensure_image() -> VMImage
"""

from __future__ import annotations

from nest_experiments.vm.image import VMImage, ensure_image
from nest_experiments.vm.qemu import (
    ProbeResult,
    VMResult,
    VMSettings,
    VMTimeoutError,
    host_awake,
    probe,
    resolve_accel,
    run_in_vm,
    softirq_priority,
    vm_settings,
)

__all__ = ["ProbeResult", "VMImage", "VMResult", "VMSettings", "VMTimeoutError", "ensure_image", "host_awake", "probe",
           "resolve_accel", "run_in_vm", "softirq_priority", "vm_settings"]
