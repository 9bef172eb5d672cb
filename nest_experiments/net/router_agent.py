"""The router guest's agent: bridges the routed links' NICs and runs the host's traffic-control requests.

The router runtime (:mod:`nest_experiments.vm.router`) boots a guest whose
only command is this module::

    python -m nest_experiments.net.router_agent SPEC_JSON

``SPEC_JSON`` names the control port (a virtio-serial port) and, per slot,
the MAC addresses of its two NICs (``x<k>`` faces the link's a end, ``y<k>``
its b end). The agent moves the NICs into the guest namespace
:data:`GUEST_NS`, names them, turns their offloads off, joins each pair with
a bridge (no STP, no forward delay) and then answers one JSON request per
line on the port, one at a time:

``time``   its monotonic clock (the host measures the offset between the clocks);
``tc``     a ``tc -n nxr -batch`` of argument lists (the host's plans: :mod:`nest_experiments.net.tcplan`);
``show``   ``tc -n nxr -j ARGS``'s output (read-back);
``classes`` HTB classes per device (netlink, in-process);
``rate``   an HTB class's rate = ceil (netlink, acknowledged by the kernel);
``dump``   every qdisc's counters on the named devices, with the time of the dump, and the guest's CPU counters;
``quit``   exit (the guest powers off).

Every answer is ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "error": "..."}``. No request is
ever run through a shell: requests carry argument lists, checked against the batch rules of
:func:`nest_experiments.net.procs.run_batch`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nest_experiments.errors import NestExpError
from nest_experiments.net import ethtool, netlink
from nest_experiments.net.procs import BatchError, in_netns, run_batch
from nest_experiments.parsers.tcstats import qdisc_row

GUEST_NS = "nxr"
PORT_NAME = "nest.ctl"


def nic_name(slot: int, side: str) -> str:
    """The guest NIC of ``slot`` facing the link's ``side`` ("a" -> ``x<k>``, "b" -> ``y<k>``)."""
    return f"{'x' if side == 'a' else 'y'}{slot}"


def bridge_name(slot: int) -> str:
    return f"br{slot}"


def find_port(name: str, sysfs: Path = Path("/sys/class/virtio-ports")) -> Path:
    """The character device of the virtio-serial port called ``name``."""
    for entry in sorted(sysfs.glob("*")):
        try:
            if (entry / "name").read_text().strip() == name:
                return Path("/dev") / entry.name
        except OSError:
            continue
    raise OSError(f"no virtio-serial port named {name} (is virtio_console loaded?)")


def nic_by_mac(mac: str, sysfs: Path = Path("/sys/class/net")) -> str:
    for entry in sorted(sysfs.glob("*")):
        try:
            if (entry / "address").read_text().strip().lower() == mac.lower():
                return entry.name
        except OSError:
            continue
    raise OSError(f"no NIC with MAC {mac} in the guest")


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _sysctl(key: str, value: str) -> None:
    with in_netns(GUEST_NS):
        Path("/proc/sys", *key.split(".")).write_text(value)


def set_up(slots: list[dict[str, Any]], mtu: int) -> None:
    """The guest namespace, each slot's two NICs in it (named, offloads off, MTU) and their bridge."""
    # a NIC's default root qdisc (fq_codel in Debian's kernel) would add an AQM of its own where the plan has
    # none (the unshaped direction, a veth's noqueue on the host); pfifo_fast is a plain FIFO
    Path("/proc/sys/net/core/default_qdisc").write_text("pfifo_fast")
    _ip("netns", "add", GUEST_NS)
    _sysctl("net.ipv6.conf.all.disable_ipv6", "1")
    _sysctl("net.ipv6.conf.default.disable_ipv6", "1")
    for slot in slots:  # named in the guest's own namespace (its /sys shows that one), then moved
        k = int(slot["slot"])
        for side in ("a", "b"):
            nic = nic_name(k, side)
            _ip("link", "set", nic_by_mac(slot[f"mac_{side}"]), "name", nic)
            _ip("link", "set", nic, "netns", GUEST_NS)
    commands: list[list[str]] = []
    for slot in slots:
        k = int(slot["slot"])
        br = bridge_name(k)
        commands.append(["link", "add", br, "type", "bridge", "stp_state", "0", "forward_delay", "0",
                         "mcast_snooping", "0"])
        for side in ("a", "b"):
            nic = nic_name(k, side)
            commands += [["link", "set", nic, "mtu", str(mtu)], ["link", "set", nic, "master", br],
                         ["link", "set", nic, "up"]]
        commands.append(["link", "set", br, "up"])
    run_batch(["ip", "-n", GUEST_NS], commands, what="router bridges")
    for slot in slots:
        for side in ("a", "b"):
            ethtool.offloads_off(GUEST_NS, nic_name(int(slot["slot"]), side))


def cpu_counters(stat: str | None = None) -> list[int]:
    """The first line of ``/proc/stat`` (all CPUs): user nice system idle iowait irq softirq steal, in ticks."""
    text = stat if stat is not None else Path("/proc/stat").read_text()
    return [int(v) for v in text.splitlines()[0].split()[1:9]]


class Agent:
    """The request handlers (one namespace, one netlink socket)."""

    def __init__(self) -> None:
        with in_netns(GUEST_NS):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            self.index = {name: index for index, name in socket.if_nameindex()}
        self.sock.bind((0, 0))
        self.sock.settimeout(5.0)
        self.seq = 0

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "time":
            return {"t": time.monotonic()}
        if op == "tc":
            return self._tc(req["cmds"], bool(req.get("force")))
        if op == "show":
            args = [str(a) for a in req["args"]]
            proc = subprocess.run(["tc", "-n", GUEST_NS, "-j", *args], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                return {"ok": False, "error": f"tc {' '.join(args)}: {proc.stderr.strip()}"}
            return {"out": proc.stdout}
        if op == "classes":
            return {"classes": {dev: self._classes(dev) for dev in req["devs"]}}
        if op == "rate":
            self._rate(str(req["dev"]), str(req["classid"]), int(req["rate_bps"]), req.get("burst_bytes"))
            return {}
        if op == "dump":
            return self._dump([str(d) for d in req["devs"]])
        return {"ok": False, "error": f"unknown request {op!r}"}

    def _tc(self, cmds: list[list[str]], force: bool) -> dict[str, Any]:
        try:
            run_batch(["tc", "-n", GUEST_NS], [[str(a) for a in c] for c in cmds], what="tc in the router guest",
                      force=force)
        except BatchError as exc:
            return {"ok": False, "error": str(exc), "index": exc.index}
        return {}

    def _exchange(self, msg: bytes, *, want: int | None) -> list[tuple[int, bytes]]:
        """Send a request numbered ``self.seq``; the payloads of its answer (kind ``want``), until done or ack."""
        self.sock.send(msg)
        out: list[tuple[int, bytes]] = []
        while True:
            for kind, seq, payload in netlink.netlink_messages(self.sock.recv(1 << 16)):
                if seq != self.seq:
                    continue
                if kind == netlink.NLMSG_ERROR:
                    code = netlink.netlink_error(payload)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return out
                if kind == netlink.NLMSG_DONE:
                    return out
                if want is None or kind == want:
                    out.append((kind, payload))

    def _dev(self, dev: str) -> int:
        if dev not in self.index:
            raise OSError(f"no device {dev} in the router guest")
        return self.index[dev]

    def _classes(self, dev: str) -> dict[str, dict[str, int]]:
        """The HTB classes of ``dev``: classid -> :class:`~nest_experiments.net.netlink.HtbClass`'s fields."""
        self.seq += 1
        index = self._dev(dev)
        found = self._exchange(netlink.dump_request(index=index, seq=self.seq), want=netlink.RTM_NEWTCLASS)
        classes = [c for _, p in found if (c := netlink.htb_class(p)) is not None and c.index == index]
        return {netlink.format_handle(c.classid): dataclasses.asdict(c) for c in classes}

    def _rate(self, dev: str, classid: str, rate_bps: int, burst_bytes: int | None) -> None:
        self.seq += 1
        msg = netlink.change_request(index=self._dev(dev), classid=classid, parent=classid.split(":")[0] + ":",
                                     rate_bps=rate_bps, seq=self.seq,
                                     burst_bytes=int(burst_bytes) if burst_bytes else None)
        self._exchange(msg, want=None)

    def _dump(self, devs: list[str]) -> dict[str, Any]:
        samples = []
        for dev in devs:
            index = self._dev(dev)
            self.seq += 1
            request = netlink.qdisc_dump_request(index, self.seq)
            before = time.monotonic()
            found = self._exchange(request, want=netlink.RTM_NEWQDISC)
            t = (before + time.monotonic()) / 2
            rows = []
            for _, payload in found:
                msg = netlink.qdisc_message(payload)
                if msg.index != index:
                    continue
                row = qdisc_row(msg.kind, msg.stats, msg.xstats)
                row.update(handle=msg.handle, parent=msg.parent)
                rows.append(row)
            samples.append({"dev": dev, "t": t, "rows": rows})
        return {"samples": samples, "cpu": cpu_counters(), "t": time.monotonic()}


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def serve(port: Path, agent: Agent) -> int:
    """Answer requests on ``port`` until ``quit``."""
    fd = os.open(port, os.O_RDWR)
    try:
        buf = b""  # the host speaks first (it polls with ``time`` until the agent answers)
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                time.sleep(0.05)  # the host end is not connected (a virtio port reads 0 then)
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                req = json.loads(line)
                if req.get("op") == "quit":
                    _send(fd, {"id": req.get("id"), "ok": True})
                    return 0
                try:
                    answer = {"ok": True, **agent.handle(req)}
                except (OSError, NestExpError, KeyError, ValueError, netlink.NetlinkError) as exc:
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                answer["id"] = req.get("id")
                _send(fd, answer)
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m nest_experiments.net.router_agent SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    try:
        port = find_port(spec.get("port", PORT_NAME))
        set_up(spec["slots"], int(spec.get("mtu", 1500)))
        agent = Agent()
    except (OSError, NestExpError) as exc:
        print(f"router agent: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"router agent: {len(spec['slots'])} links bridged", file=sys.stderr, flush=True)
    return serve(port, agent)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
