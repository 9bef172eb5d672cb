"""Guest-side helper of the VM runtime (standard library only).

The guest's ``/init`` runs, inside the chroot on the host's root file system::

    <python> -I -S /run/nestvm/guest.py /run/nestvm/spec.json

This reads the JSON spec written by the host (``argv``, ``cwd``, ``env``,
``mounts``, ``softirq_fifo``), mounts the writable 9p shares at the same
absolute paths as on the host, changes directory, puts ``ksoftirqd`` at the
requested real-time priority and ``execvpe``s the command: no shell ever
sees a value. ``/init`` records the exit status in the run share. The file is
copied into the run share by the host, so it must not import the package.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

MS_RDONLY = 1


def _mount(source: str, target: str, fstype: str, data: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(source.encode(), target.encode(), fstype.encode(), 0, data.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def softirq_threads(proc: str = "/proc") -> list[int]:
    """The pids of the kernel's ``ksoftirqd/N`` threads."""
    pids = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/comm", encoding="utf-8") as fh:
                comm = fh.read().strip()
        except OSError:
            continue  # exited
        if comm.startswith("ksoftirqd/"):
            pids.append(int(entry))
    return sorted(pids)


def raise_softirq_threads(priority: int) -> None:
    """``ksoftirqd`` at ``SCHED_FIFO`` ``priority``: the routers' forwarding before the applications."""
    pids = softirq_threads()
    if not pids:
        raise OSError("no ksoftirqd thread found in /proc")
    for pid in pids:
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(priority))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: guest.py SPEC.json", file=sys.stderr)
        return 125
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    msize = int(spec.get("msize", 512 * 1024))
    try:
        for m in spec.get("mounts", []):
            os.makedirs(m["path"], exist_ok=True)  # e.g. below the guest's own /tmp
            _mount(m["tag"], m["path"], "9p", f"trans=virtio,version=9p2000.L,msize={msize}")
        os.chdir(spec["cwd"])
        if spec.get("softirq_fifo"):
            raise_softirq_threads(int(spec["softirq_fifo"]))  # see qemu.softirq_priority
    except OSError as exc:
        print(f"nestvm-guest: {exc}", file=sys.stderr)
        return 125
    cmd = list(spec["argv"])
    env = dict(spec["env"])
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        print(f"nestvm-guest: cannot execute {cmd[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
