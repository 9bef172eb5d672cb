"""NeST's topology commands, run in batches: the same commands, a handful of processes instead of ~120.

NeST builds a topology by running one command per step (``ip netns add``,
``ip link add ... type veth``, ``ip netns exec NS ip ...``, ``ip netns exec NS
sysctl -w ...``), each in its own process (two with ``ip netns exec``), and
ignores their exit status. Under the TCG VM a process costs ~0.2-0.3 s: the
NeST paper's 10-node topology took ~31 s to build, most of a run's set-up.
While :func:`batched` is active, NeST's commands are recorded instead of run
(:class:`Batcher`), and run when it ends, in the order that keeps their
meaning:

1. the root namespace's commands (create namespaces, create veth pairs, move
   their ends into namespaces), in NeST's order, in one ``ip -batch -``;
2. every namespace's sysctls, in NeST's order, written in-process
   (:func:`~nest_experiments.net.procs.sysctl_in`: a ``setns``, no process)
   and read back;
3. per namespace, its ``ip`` commands in NeST's order in one ``ip -n NS
   -batch -``, the namespaces' batches side by side (``together``: each is a
   process that depends on no other namespace's).

A namespace's commands only name that namespace's interfaces, which exist
once step 1 ran, so running them after all of step 1 changes nothing; its
sysctls (IPv6 forwarding and DAD on an interface) before its ``ip`` commands
make DAD off before the addresses come up, as NeST means. Any command of
another form, or one whose output NeST reads, first runs what is recorded,
then runs as NeST would. Unlike NeST, a failed command stops the build
(:class:`~nest_experiments.errors.NetworkSetupError` naming it).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nest_experiments.errors import NetworkSetupError

ROOT, IP, SYSCTL = "root", "ip", "sysctl"
VERSION_QUERIES = ("ip -V",)


@dataclass(frozen=True)
class Step:
    """One NeST command, classified: ``kind`` (:data:`ROOT`, :data:`IP` or :data:`SYSCTL`), the namespace it runs
    in (None for the root namespace) and its arguments (after ``ip``; a sysctl's ``key=value``)."""

    kind: str
    ns: str | None
    args: tuple[str, ...]


def with_keywords(args: list[str]) -> list[str]:
    """``link add NAME ...`` and ``link set DEV ...`` with their keywords (``name NAME``, ``dev DEV``): NeST leaves
    them out, and iproute2 then reads a device named like the prefix of one of its keywords as that keyword (an
    interface ``a``, named after node ``a``, is ``address``: ``ip link set a netns x`` fails). Other ``ip``
    arguments are returned as they are."""
    if args[:2] == ["link", "add"] and len(args) > 2 and args[2] != "name":
        return [*args[:2], "name", *args[2:]]
    if args[:2] == ["link", "set"] and len(args) > 2 and args[2] not in ("dev", "group"):
        return [*args[:2], "dev", *args[2:]]
    return args


def classify(cmd: str) -> Step | None:
    """The step a NeST command string is, or None when it is of a form this module does not batch; ``ip link``
    devices get their keywords (:func:`with_keywords`)."""
    parts = cmd.split()
    if len(parts) < 3 or parts[0] != "ip":
        return None
    if parts[1:3] == ["netns", "add"] and len(parts) == 4:
        return Step(ROOT, None, tuple(parts[1:]))
    if parts[1:3] == ["link", "add"] and "veth" in parts and "peer" in parts:
        return Step(ROOT, None, tuple(with_keywords(parts[1:])))
    if parts[1:3] == ["link", "set"] and len(parts) == 6 and parts[4] == "netns":
        return Step(ROOT, None, tuple(with_keywords(parts[1:])))
    if parts[1:3] == ["netns", "exec"] and len(parts) >= 6:
        ns, rest = parts[3], parts[4:]
        if rest[0] == "ip" and not rest[1].startswith("-"):
            return Step(IP, ns, tuple(with_keywords(rest[1:])))
        if rest[:2] == ["sysctl", "-w"] and len(rest) == 3 and "=" in rest[2]:
            return Step(SYSCTL, ns, (rest[2],))
    return None


@dataclass
class Plan:
    """Recorded steps in the order they will run (module docstring)."""

    root: list[list[str]] = field(default_factory=list)
    per_ns: dict[str, tuple[list[tuple[str, str]], list[list[str]]]] = field(default_factory=dict)

    def add(self, step: Step) -> None:
        if step.kind == ROOT:
            self.root.append(list(step.args))
            return
        assert step.ns is not None
        sysctls, ips = self.per_ns.setdefault(step.ns, ([], []))
        if step.kind == SYSCTL:
            key, _, value = step.args[0].partition("=")
            sysctls.append((key, value))
        else:
            ips.append(list(step.args))

    def __len__(self) -> int:
        return len(self.root) + sum(len(s) + len(i) for s, i in self.per_ns.values())


RunBatch = Callable[[list[str], list[list[str]]], None]  # (prefix, commands): raises on a failed command
Sysctl = Callable[[str, str, str], str]  # (ns, key, value) -> the value read back
Together = Callable[[Sequence[Callable[[], object]]], None]  # runs jobs (side by side), raises the first failure


def one_after_another(jobs: Sequence[Callable[[], object]]) -> None:
    for job in jobs:
        job()


class Batcher:
    """Records NeST's commands (:meth:`exec_subprocess`, NeST's signature) and runs them in batches (:meth:`flush`).
    ``direct``: how a command runs that is not batched (NeST's own ``exec_subprocess``)."""

    def __init__(self, *, direct: Callable[..., Any], run_batch: RunBatch, sysctl: Sysctl,
                 together: Together = one_after_another) -> None:
        self._direct = direct
        self._run_batch = run_batch
        self._sysctl = sysctl
        self._together = together
        self.plan = Plan()
        self.processes = 0  # processes the flushes started (for the tests and the bench)
        self.recorded = 0
        self._versions: dict[str, Any] = {}

    def add_ip(self, ns: str, commands: list[list[str]]) -> None:
        """Our own ``ip`` commands for namespace ``ns`` (routes, rules), run in its batch after NeST's."""
        for args in commands:
            self.plan.add(Step(IP, ns, tuple(args)))

    def exec_subprocess(self, cmd: str, shell: bool = False, output: bool = False) -> Any:
        if cmd in VERSION_QUERIES and output and not shell:  # NeST asks before each connect; the answer is fixed
            if cmd not in self._versions:
                self._versions[cmd] = self._direct(cmd, shell=shell, output=output)
            return self._versions[cmd]
        step = None if shell or output else classify(cmd)
        if step is None:
            self.flush()
            return self._direct(cmd, shell=shell, output=output)
        self.plan.add(step)
        self.recorded += 1
        return 0  # NeST's "exit status 0"; a failure raises at the flush

    def flush(self) -> None:
        plan, self.plan = self.plan, Plan()
        if plan.root:
            self._run_batch(["ip"], plan.root)
            self.processes += 1
        for ns, (sysctls, _) in plan.per_ns.items():
            for key, value in sysctls:
                got = self._sysctl(ns, key, value)
                if got != value:
                    raise NetworkSetupError(f"{ns}: {key} is {got!r} after setting {value!r} (NeST's sysctl)")
        batches = [functools.partial(self._run_batch, ["ip", "-n", ns], ips) for ns, (_, ips) in plan.per_ns.items() if ips]
        self._together(batches)
        self.processes += len(batches)


@contextmanager
def batched(*, run_batch: RunBatch, sysctl: Sysctl, together: Together = one_after_another) -> Iterator[Batcher]:
    """NeST's commands recorded while the body runs, then run in batches (not when the body raises: what was only
    recorded was never created, and the namespaces that were are torn down as always). Patches
    ``exec_subprocess`` in every loaded ``nest.engine`` module."""
    import nest.engine.exec as nest_exec

    original = nest_exec.exec_subprocess
    batcher = Batcher(direct=original, run_batch=run_batch, sysctl=sysctl, together=together)
    patched = [m for name, m in list(sys.modules.items())
               if name.startswith("nest.engine.") and getattr(m, "exec_subprocess", None) is original]
    for module in patched:
        module.exec_subprocess = batcher.exec_subprocess  # type: ignore[attr-defined]
    try:
        yield batcher
    finally:
        for module in patched:
            module.exec_subprocess = original  # type: ignore[attr-defined]
    batcher.flush()
