"""``doctor``: what this machine has, what is missing and how to get it, and where experiments run."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

from nest_experiments.net.kernel import FEATURES, TOOLS, kernel_release, probe_feature

#: what the default experiment needs from the kernel (pie/fq_pie through the VM when missing)
DEFAULT_NEEDS = ("veth", "htb", "pie", "fq_pie", "netem")
AQM = ("pie", "fq_pie", "netem")


def _row(out: TextIO, name: str, ok: bool, detail: str) -> None:
    out.write(f"  {'ok ' if ok else 'NO '} {name:<10} {detail}\n")


def doctor(out: TextIO = sys.stdout, *, probe_vm: bool = True) -> int:
    """Print the report; 0 when experiments can run here (``probe_vm=False``: the VM runtime, where the kernel
    needs it, is assumed to work if qemu is installed, and the verdict says it was not checked)."""
    root = os.geteuid() == 0
    out.write(f"root: {'yes' if root else 'no (experiments need root: use sudo)'}\n")
    out.write(f"kernel {kernel_release()} features (probed in a throw-away namespace):\n")
    features = {name: probe_feature(name) for name in FEATURES} if root else {}
    for name, probe in features.items():
        _row(out, name, probe.ok, probe.detail)
    if not root:
        out.write("  (not probed: needs root)\n")
    out.write("tools:\n")
    for name, (exe, package, needed_by) in TOOLS.items():
        path = shutil.which(exe)
        _row(out, name, path is not None, path or f"missing: apt-get install {package}  (for {needed_by})")
    _players_report(out)
    host_ok = root and all(features[f].ok for f in DEFAULT_NEEDS)
    vm_ok = _vm_report(out, root and not host_ok, probe_vm)
    if host_ok:
        out.write("experiments run on: the host (its kernel has every qdisc the experiments use)\n")
    elif vm_ok:
        unchecked = "" if probe_vm else " (not checked: doctor without --no-vm boots a guest to check it)"
        lacks = [f for f in DEFAULT_NEEDS if not features[f].ok]
        if set(lacks) <= set(AQM):
            out.write(f"experiments run on: the router runtime (this kernel lacks {', '.join(lacks)}, qdiscs only: "
                      "the apps run on the host, the links that need them through one guest that only forwards); "
                      "`run --runtime auto` picks it, `--runtime vm` runs the whole experiment in the guest instead"
                      f"{unchecked}\n")
        else:
            out.write(f"experiments run on: the VM runtime (this kernel lacks {', '.join(lacks)}, more than qdiscs); "
                      f"`run --runtime auto` picks it{unchecked}\n")
    else:
        out.write("experiments cannot run here: " + ("run as root" if not root else
                  "the kernel lacks the AQMs and the VM runtime does not work (see above)") + "\n")
    return 0 if (host_ok or vm_ok) else 1


def _players_report(out: TextIO) -> None:
    """The DASH players (``apps.NAME.player``) this machine can run, and how to get the others."""
    from nest_experiments.dash import players

    out.write("DASH players (apps.NAME.player):\n")
    for name, why in players.report():
        _row(out, name, why is None, players.KINDS[name].describe() if why is None else f"missing: {why}")


def _vm_report(out: TextIO, needed: bool, probe_vm: bool = True) -> bool:
    if shutil.which("qemu-system-x86_64") is None:
        out.write("VM runtime: NO (apt-get install qemu-system-x86 busybox-static cpio kmod)\n")
        return False
    if not needed:
        out.write("VM runtime: not needed here (not probed)\n")
        return False
    if not probe_vm:
        out.write("VM runtime: qemu is installed (not probed: --no-vm)\n")
        return True
    from nest_experiments.vm import probe

    out.write("VM runtime: booting a guest to check that it loads sch_pie ... ")
    out.flush()
    result = probe()
    out.write(f"{'ok' if result.ok else 'NO'}: {result.reason}; accel {result.accel}, boot {result.boot_s:.1f} s, "
              f"guest kernel {result.guest_kernel}\n")
    return result.ok
