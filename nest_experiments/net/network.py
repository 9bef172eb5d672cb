"""The adapter: the only module that talks to NeST, netlink and iproute2.

:class:`Network` realises a pure :class:`~nest_experiments.config.topology.TopologySpec`
and the experiment's link configs: namespaces, veth pairs, addresses and
routes through NeST; source routing, sysctls, offloads and traffic control
through iproute2 argument lists with the exit status checked. Everything it
configures is read back from the kernel and compared; a mismatch raises
:class:`NetworkSetupError` (NeST itself ignores failures). Leaving the
``with`` block removes every process in the namespaces and the namespaces.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from functools import cache, partial
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from nest_experiments.config import FirewallConfig, LinkConfig, NodeConfig, qdisc_kinds
from nest_experiments.config import topology as topo
from nest_experiments.errors import ConfigError, KernelFeatureError, MissingToolError, NestExpError, NetworkSetupError
from nest_experiments.net import ethtool, fwshape, nestbatch, nftplan, routed, rtnl, tcplan
from nest_experiments.net.procs import (
    BatchError,
    RunState,
    build_lock,
    check_run,
    delete_namespaces,
    delete_nft_tables,
    kill_namespace_processes,
    list_root_ifnames,
    ns_exec,
    require_tool,
    run_batch,
    side_by_side,
    sysctl_in,
)
from nest_experiments.net.sockets import ipv4_addresses

NEST_TC_DIR = Path("/usr/lib/tc")
TAP_MTU = 1500  # as NeST's veths
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


@cache
def nest_modules() -> dict[str, ModuleType]:
    """Import NeST with its known warts neutralised (DESIGN §2.2)."""
    if not NEST_TC_DIR.exists():
        raise MissingToolError(f"NeST needs {NEST_TC_DIR} (netem tables); run ./setup.sh, which links it to "
                               "/usr/lib/x86_64-linux-gnu/tc")
    sigterm = signal.getsignal(signal.SIGTERM)
    import nest  # noqa: F401  (root check, config, signal handlers)
    import nest.clean_up
    import nest.config
    import nest.topology
    import nest.topology_map

    signal.signal(signal.SIGTERM, sigterm)  # NeST replaces it with its own cleanup
    for hook in (nest.clean_up.tcp_modules_clean_up, nest.clean_up.delete_namespaces,
                 nest.clean_up.delete_encoded_mpeg_dash_chunks):
        atexit.unregister(hook)  # the first imports nest.experiment (9 Manager processes) at exit
    nest.config.set_value("assign_random_names", False)
    nest.config.set_value("show_progress_bar", False)
    logging.getLogger("nest").setLevel(logging.ERROR)
    return {"topology": nest.topology, "map": nest.topology_map}


class Network:
    """A realised topology. Use as a context manager."""

    def __init__(self, spec: topo.TopologySpec, links: tuple[LinkConfig, ...] = (), *, state: RunState,
                 congestion_control: str = "cubic", firewalls: tuple[FirewallConfig, ...] = (),
                 router: routed.Router | None = None, nodes: tuple[NodeConfig, ...] = ()) -> None:
        self.spec = spec
        self.nodes = nodes  # [nodes.NAME]: per-namespace sysctls (tcp_ecn), set after the defaults and read back
        self.links = links
        self.state = state
        self.router = router  # the router runtime's guest: links needing qdiscs the host lacks go through it
        self.routed: dict[str, routed.RoutedLink] = {}
        if router is not None:
            ends = {lk.name: (lk.a, lk.b) for lk in spec.links}
            try:
                planned = routed.plan_routed(links, router.missing, router.taps, ends)
            except ValueError as exc:
                raise NetworkSetupError(f"router runtime: {exc}") from None
            self.routed = {r.link: r for r in planned}
        self._taps_in: list[tuple[str, str, str]] = []  # (namespace, interface, TAP name): moved back at teardown
        self.cc = congestion_control
        self.firewalls = firewalls
        self.egresses: list[tcplan.Egress] = []
        self.firewall_plans: list[nftplan.FirewallPlan] = []
        self.shape_plans: list[fwshape.ShapePlan] = []
        self._offloads_done: set[tuple[str, str]] = set()
        self.build_s: dict[str, float] = {}  # seconds of each step of the build (nest, nodes, verify, links, ...)

    # ------------------------------------------------------------ names

    def ns(self, node: str) -> str:
        return f"{self.state.prefix}-{node}"

    def addr(self, node: str) -> str:
        return str(self.spec.address_of(node))

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Network:
        try:
            self.build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.teardown()

    def build(self) -> None:
        """Create and configure everything; under :func:`procs.build_lock`, so that runs side by side on one
        machine (cluster workers) never see each other's veth names in the root namespace."""
        with build_lock():
            self._build()

    def _build(self) -> None:
        ifnames = sorted({link.ifname(n) for link in self.spec.links for n in (link.a, link.b)})
        clash = sorted(set(ifnames) & set(list_root_ifnames()))
        if clash:
            raise NetworkSetupError(f"interfaces {', '.join(clash)} already exist in the root namespace; "
                                    "rename them or the topology's nodes")
        self.state.namespaces = [self.ns(n) for n in self.spec.nodes]
        self.state.root_ifnames = ifnames
        self.state.save()  # before creating anything: a later run can clean up after us
        steps = {"nest": self._create_with_nest, "taps": self._attach_taps, "nodes": self._configure_nodes,
                 "verify": self.verify_topology, "links": self._apply_links, "firewalls": self._apply_firewalls}
        self._allow_congestion_control()
        for name, step in steps.items():
            t = time.monotonic()
            step()
            self.build_s[name] = round(time.monotonic() - t, 3)

    def teardown(self) -> None:
        """Remove processes and namespaces; SIGINT/SIGTERM wait until it is done."""
        if os.getpid() != self.state.pid:
            return  # a forked child (pyroute2's netns helper) must never tear down our network
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            self._teardown()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _teardown(self) -> None:
        kill_namespace_processes(*self.state.namespaces)
        self._detach_taps()
        delete_nft_tables(self.state.nft_tables)
        delete_namespaces(self.state.namespaces)
        if "map" in (mods := _loaded_nest()):
            mods["map"].TopologyMap.delete_all_mapping()
        self.state.remove()

    # ------------------------------------------------------------ topology (NeST)

    def _create_with_nest(self) -> None:
        """The topology through NeST's API, its commands run in batches (:mod:`nestbatch`: a handful of processes
        instead of ~120, each ~0.3 s under TCG), then our static routes."""
        nt = nest_modules()["topology"]
        nodes = {}
        with nestbatch.batched(run_batch=_nest_batch, sysctl=sysctl_in, together=side_by_side) as batch:
            for name, role in self.spec.nodes.items():
                nodes[name] = (nt.Router if role == "router" else nt.Node)(self.ns(name))
            for link in self.spec.links:
                if link.name in self.routed:
                    continue  # its ends are the router guest's TAPs (_attach_taps)
                ia, ib = nt.connect(nodes[link.a], nodes[link.b], link.ifname(link.a), link.ifname(link.b))
                ia.set_address(str(link.address(link.a, self.spec.base)))
                ib.set_address(str(link.address(link.b, self.spec.base)))
            if not self.routed:
                for node, commands in self._route_commands().items():  # in each namespace's batch, after NeST's
                    batch.add_ip(self.ns(node), commands)

    def _attach_taps(self) -> None:
        """The routed links' TAPs into their nodes' namespaces (named, addressed, up, offloads off), then the
        routes, which need every interface (net.routed). Each TAP moved is listed before the next step: teardown
        moves it back to the root namespace, whatever fails after."""
        if not self.routed:
            return
        for r in self.routed.values():
            link = self.spec.link(r.link)
            for node in (link.a, link.b):
                ifname = link.ifname(node)
                move, inside = routed.tap_in_commands(r, node, self.ns(node), ifname,
                                                      str(link.address(node, self.spec.base)), TAP_MTU)
                check_run(move, what=f"router runtime: TAP {r.tap(node)} into {node}")
                self._taps_in.append((self.ns(node), ifname, r.tap(node)))
                run_batch(["ip", "-n", self.ns(node)], inside, what=f"router runtime: TAP on {node}")
                self.offloads_off(node, ifname)
        for node, commands in self._route_commands().items():
            run_batch(["ip", "-n", self.ns(node)], commands, what=f"routes on {node}")

    def _detach_taps(self) -> None:
        """Every TAP this run moved, back to the root namespace under its own name (before the namespaces go:
        a TAP deleted with its namespace would leave qemu a dead device for the rest of the sweep); the guest's
        qdiscs of this run removed. Best effort: a failure here must not hide the run's own error, and the
        router checks its TAPs before the next run (vm.router)."""
        for ns, ifname, tap in reversed(self._taps_in):
            try:
                run_batch(["ip", "-n", ns], routed.tap_out_commands(tap, ifname), what="router runtime: TAP back")
            except NestExpError:
                pass
        self._taps_in.clear()
        if self.router is not None and self.routed:
            devs = [r.guest_dev(n) for r in self.routed.values() for n in (r.a, r.b)]
            try:
                self.router.call("tc", cmds=[["qdisc", "del", "dev", d, "root"] for d in devs], force=True)
            except NestExpError:
                pass

    def _route_commands(self) -> dict[str, list[list[str]]]:
        """Per node: the static routes, then source routing (a second default route per source address)."""
        batches: dict[str, list[list[str]]] = {}
        for route in topo.routes(self.spec):
            batches.setdefault(route.node, []).append(["route", "replace", str(route.dest), "via", str(route.via),
                                                       "dev", route.dev])
        table_routes, rules = topo.source_routing(self.spec)
        for t in table_routes:
            batches.setdefault(t.node, []).append(["route", "replace", "default", "via", str(t.via),
                                                   "dev", t.dev, "table", str(t.table)])
        for rule in rules:
            batches.setdefault(rule.node, []).append(["rule", "add", "from", str(rule.source), "table", str(rule.table)])
        return batches

    def _allow_congestion_control(self) -> None:
        """A namespace may only default to an 'allowed' algorithm; add ours, restore it at teardown."""
        allowed = ALLOWED_CC.read_text().split()
        if self.cc in allowed:
            return
        if self.cc not in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split():
            raise KernelFeatureError(f"experiment.tcp_congestion_control: the kernel has no '{self.cc}' "
                                     f"(module tcp_{self.cc}); use --runtime vm")
        self.state.host_sysctls[str(ALLOWED_CC)] = " ".join(allowed)
        self.state.save()
        ALLOWED_CC.write_text(" ".join(allowed + [self.cc]))

    def _configure_nodes(self) -> None:
        for node, role in self.spec.nodes.items():
            self.sysctl(node, "net.ipv4.tcp_congestion_control", self.cc)
            if role == "router":
                self.sysctl(node, "net.ipv4.ip_forward", "1")
            if len(self.spec.links_of(node)) > 1:  # asymmetric paths: loose reverse-path filter
                self.sysctl(node, "net.ipv4.conf.all.rp_filter", "2")
        for cfg in self.nodes:
            for key, value in cfg.sysctls().items():
                self.sysctl(cfg.name, key, value)

    def _ip(self, node: str, args: list[str]) -> str:
        return check_run(["ip", "-n", self.ns(node), *args], what=f"ip on {node}")

    def sysctl(self, node: str, key: str, value: str) -> None:
        got = sysctl_in(self.ns(node), key, value)
        if got != value:
            raise NetworkSetupError(f"{node}: {key} is {got!r} after setting {value!r}")

    def verify_topology(self) -> None:
        """Read addresses back from the kernel (in-process: no process per node): NeST ignores every failure."""
        for node in self.spec.nodes:
            links = self.spec.links_of(node)
            have = ipv4_addresses(self.ns(node), [link.ifname(node) for link in links])
            for link in links:
                want = (link.ifname(node), str(link.address(node, self.spec.base)))
                if have.get(want[0]) != want[1]:
                    raise NetworkSetupError(f"{node}: interface {want[0]} with {want[1]} is missing after NeST set it up"
                                            f" (found {have.get(want[0]) or 'no IPv4 address'})")

    # ------------------------------------------------------------ firewalls (nftables)

    def _apply_firewalls(self) -> None:
        """Each router's firewall rules in one ``nft -f -`` transaction, listed in the state file first, then
        read back; a rule the kernel does not have as planned stops the run."""
        plans = nftplan.plan_firewalls(self.firewalls, self.ns)
        if not plans:
            return
        require_tool("nft", "nftables")
        self.state.nft_tables = [[p.ns, nftplan.FAMILY, nftplan.TABLE] for p in plans]
        self.state.save()
        for plan in plans:
            proc = subprocess.run(ns_exec(plan.ns, ["nft", "-f", "-"]), input=plan.script(), capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                err = (proc.stderr or proc.stdout).strip().splitlines()
                raise NetworkSetupError(f"firewall on {plan.router}: nft failed: {err[0] if err else proc.returncode}"
                                        " (does the kernel have nf_tables and nft_limit?)")
            problems = nftplan.compare(plan, self.nft_listing(plan.ns))
            if problems:
                raise NetworkSetupError("firewall differs from the plan: " + "; ".join(problems))
        self.firewall_plans = plans
        self._apply_shapers()

    def _apply_shapers(self) -> None:
        """The ``shape`` firewalls (:mod:`fwshape`): offloads off around the router, the ifbs with their HTB and
        FIFO, the ingress qdiscs and filters that redirect to them; then all read back. The ifbs and ingress
        qdiscs are the router namespace's own: they go with it."""
        plans = fwshape.plan_shapers(self.firewalls, self.spec, self.ns)
        for plan in plans:
            for node, dev in plan.no_offloads:
                self.offloads_off(node, dev)
            run_batch(["ip", "-n", plan.ns], plan.link_commands(), what=f"ifb on {plan.router}")
            self.apply_plans(plan.ns, [s.egress for s in plan.shapers], fresh=True)  # the ifbs just made
            _tc_batch(plan.ns, plan.filter_commands())
            problems = fwshape.compare_links(plan, json.loads(self._ip(plan.router, ["-j", "link", "show", "type", "ifb"])))
            problems += fwshape.compare_ingress(plan, self._tc_json(plan.ns, ["qdisc", "show"]))
            for dev in plan.devs:
                problems += fwshape.compare_filters(plan, dev, self._tc_json(plan.ns, ["filter", "show", "dev", dev, "ingress"]))
            if problems:
                raise NetworkSetupError("firewall shaper differs from the plan: " + "; ".join(problems))
        self.shape_plans = plans

    @staticmethod
    def _tc_json(ns: str, args: list[str], *, stats: bool = False) -> list[dict[str, Any]]:
        text = check_run(["tc", "-n", ns, *(["-s"] if stats else []), "-j", *args], what="tc read-back")
        try:
            return fwshape.parse_tc_json(text)
        except ValueError as exc:
            raise NetworkSetupError(f"tc read-back in {ns}: not JSON: {exc}") from exc

    def nft_listing(self, ns: str) -> dict[str, Any]:
        """``nft -j list table`` of our firewall table in ``ns``, parsed."""
        text = check_run(ns_exec(ns, ["nft", "-j", "list", "table", nftplan.FAMILY, nftplan.TABLE]),
                         what="nft read-back")
        try:
            return dict(json.loads(text))
        except ValueError as exc:
            raise NetworkSetupError(f"nft read-back in {ns}: not JSON: {exc}") from exc

    def firewall_counters(self) -> list[dict[str, Any]]:
        """Per firewall and direction, the packets and bytes matched and dropped so far (``firewall.csv``); a
        ``shape`` firewall's from tc (its nft rule sits after the shaper: :mod:`fwshape`)."""
        shaped = {(row["firewall"], row["direction"]): row for plan in self.shape_plans for row in self._shape_counters(plan)}
        return [shaped.get((row["firewall"], row["direction"]), row) for plan in self.firewall_plans
                for row in nftplan.counter_rows(plan, self.nft_listing(plan.ns))]

    def _shape_counters(self, plan: fwshape.ShapePlan) -> list[dict[str, Any]]:
        filters = {dev: self._tc_json(plan.ns, ["filter", "show", "dev", dev, "ingress"], stats=True) for dev in plan.devs}
        return [fwshape.counter_row(plan, s, filters, self._tc_json(plan.ns, ["qdisc", "show", "dev", s.ifb], stats=True))
                for s in plan.shapers]

    # ------------------------------------------------------------ traffic control

    def _apply_links(self) -> None:
        by_ns: dict[str, list[tcplan.EgressPlan]] = {}
        for node, dev in no_offloads(self.links, self.spec):
            self.offloads_off(node, dev)
        guest: list[tcplan.EgressPlan] = []
        for link in self.links:
            spec_link = self.spec.link(link.name)
            for node, peer, egress in link.egresses():
                dev = spec_link.ifname(node)
                if link.name in self.routed:  # every shaped egress of a routed link is the guest's
                    if egress.shaped:
                        plan = tcplan.plan_egress(routed.GUEST_NS, self.routed[link.name].guest_dev(node), egress,
                                                  htb_burst_bytes=routed.ROUTED_HTB_BURST_BYTES)
                        guest.append(plan)
                        self.egresses.append(tcplan.Egress(link=link.name, node=node, peer=peer, dev=dev,
                                                           ns=self.ns(node), plan=plan, routed=True))
                    continue
                if egress.shaped:
                    plan = tcplan.plan_egress(self.ns(node), dev, egress)
                    by_ns.setdefault(plan.ns, []).append(plan)
                    self.egresses.append(tcplan.Egress(link=link.name, node=node, peer=peer, dev=dev, ns=self.ns(node), plan=plan))
        # each namespace's two processes (tc batch, read-back) side by side with the others'; the devices are the
        # ones NeST just made: no root qdisc of ours to delete first
        side_by_side([partial(self.apply_plans, ns, plans, fresh=True) for ns, plans in by_ns.items()])
        if guest:
            self._apply_in_guest(guest)

    def _apply_in_guest(self, plans: list[tcplan.EgressPlan]) -> None:
        """The routed egresses' plans in the router guest: its NICs' root qdiscs deleted (a run before may have
        left one), every command in one batch, then read back as on the host (``tc -j qdisc show``, the HTB
        classes over netlink) and compared."""
        assert self.router is not None
        self.router.call("tc", cmds=[list(p.commands[0][3:]) for p in plans], force=True)
        try:
            self.router.call("tc", cmds=[list(c[3:]) for p in plans for c in p.commands[1:]])
        except NetworkSetupError as exc:
            raise _explain_tc(exc, next((c for p in plans for c in p.commands[1:]), ())) from None
        self.read_back_guest(plans)

    def read_back_guest(self, plans: list[tcplan.EgressPlan]) -> None:
        """Compare the router guest's qdiscs and HTB classes with ``plans`` (routed egresses)."""
        assert self.router is not None
        shown = json.loads(self.router.call("show", args=["qdisc", "show"])["out"])
        classes = self.router.call("classes", devs=[p.dev for p in plans if p.htb_class])["classes"]
        problems = []
        for plan in plans:
            problems += tcplan.compare_qdiscs(plan, [q for q in shown if q.get("dev") == plan.dev])
            if plan.htb_class:
                problems += tcplan.compare_rate(plan, {c: f["rate_bps"] for c, f in classes.get(plan.dev, {}).items()})
        if problems:
            raise NetworkSetupError("traffic control in the router guest differs from the plan: " + "; ".join(problems))

    def offloads_off(self, node: str, dev: str) -> None:
        """TSO, GSO, GRO and UDP GSO off on ``node``'s ``dev`` (once: links, captures and shapers ask for the same
        interfaces, and a process costs ~0.3 s under TCG)."""
        if (node, dev) in self._offloads_done:
            return
        self._offloads_done.add((node, dev))
        ethtool.offloads_off(self.ns(node), dev)  # in-process: the ioctl ethtool -K sends (net.ethtool)

    def apply_plans(self, ns: str, plans: list[tcplan.EgressPlan], *, fresh: bool = False) -> None:
        """Every plan of one namespace with one ``tc -batch`` process (two unless ``fresh``), then one read-back.

        Under the TCG VM a process costs a large fraction of a second: one
        ``tc`` per command made a 10-node topology take minutes to build.
        Unless the devices are ``fresh`` (made by this build: the kernel's
        default root, which ``qdisc add ... root`` replaces), a first batch
        deletes the root qdiscs (``-force``: a device may have none to delete);
        the batch that adds everything must succeed.
        """
        if not fresh:
            _tc_batch(ns, [plan.commands[0] for plan in plans], force=True)
        _tc_batch(ns, [argv for plan in plans for argv in plan.commands[1:]])
        self.read_back(*plans)

    def read_back(self, *plans: tcplan.EgressPlan) -> None:
        """Compare the kernel's qdiscs (``tc -j qdisc show``) and HTB classes (a netlink dump, in-process) with
        ``plans`` (all of one namespace)."""
        ns = plans[0].ns
        shown = json.loads(check_run(["tc", "-n", ns, "-j", "qdisc", "show"], what="tc read-back"))
        rates = rtnl.htb_rates(ns, [plan.dev for plan in plans if plan.htb_class])
        problems = []
        for plan in plans:
            problems += tcplan.compare_qdiscs(plan, [q for q in shown if q.get("dev") == plan.dev])
            if plan.htb_class:
                problems += tcplan.compare_rate(plan, rates[plan.dev])
        if problems:
            raise NetworkSetupError("traffic control differs from the plan: " + "; ".join(problems))

    def rate_egresses(self, link: str, direction: str) -> list[tcplan.Egress]:
        """The shaped egresses of ``link`` whose rate a change in ``direction`` applies to, for
        :class:`~nest_experiments.net.rtnl.HtbRates` (the one way to change a rate mid-run).

        ``direction`` is "forward" (a -> b, at a), "reverse" (b -> a, at b) or
        "both". A link, direction or egress without a rate raises
        :class:`ConfigError` before anything changes.
        """
        where = f"links.{link}"
        try:
            spec = self.spec.link(link)
        except KeyError:
            raise ConfigError(where, f"no such link in topology {self.spec.name!r}") from None
        nodes = {"forward": [spec.a], "reverse": [spec.b], "both": [spec.a, spec.b]}.get(direction)
        if nodes is None:
            raise ConfigError(where, f"direction must be forward, reverse or both, got {direction!r}")
        found = {e.node: e for e in self.egresses if e.link == link}
        unshaped = [n for n in nodes if n not in found or found[n].plan.htb_class is None]
        if unshaped:
            raise ConfigError(where, f"the egress at {', '.join(unshaped)} has no rate to change")
        return [found[n] for n in nodes]


def no_offloads(links: Sequence[LinkConfig], spec: topo.TopologySpec) -> list[tuple[str, str]]:
    """(node, interface) whose offloads go off: both ends of every link of a node that shapes an egress (a link
    with ``offloads = true`` keeps its own). A qdisc holds what its device is handed: a GSO super-packet is cut
    into packets only after the qdisc (``validate_xmit_skb`` on dequeue), so a sender's TSO/GSO on an access link
    put 2-16 segments into one skb of the bottleneck's queue (seen: 20 skbs holding 90 KB), HTB released them as
    one burst and then sent nothing while it paid the debt (200-300 ms at 640 kbit/s). With the neighbours'
    interfaces off too, the sender (or the router before) sends packets no larger than the MTU."""
    shaping = {node for link in links for node, _, egress in link.egresses() if egress.shaped}
    return [(node, spec.link(link.name).ifname(node)) for link in links if not link.offloads
            and (link.a in shaping or link.b in shaping) for node in (link.a, link.b)]


def _loaded_nest() -> dict[str, ModuleType]:
    return nest_modules() if nest_modules.cache_info().currsize else {}


def _nest_batch(prefix: list[str], commands: list[list[str]]) -> None:
    run_batch(prefix, commands, what="NeST topology")


def _tc_batch(ns: str, commands: list[tuple[str, ...]], *, force: bool = False) -> None:
    """Run ``tc -n NS`` commands (each an argv starting ``tc -n NS``) in one ``tc -batch -`` process."""
    prefix = ("tc", "-n", ns)
    if any(tuple(argv[:3]) != prefix for argv in commands):
        raise NetworkSetupError(f"cannot batch {commands!r} in {ns}")  # a bug: plans never make such commands
    try:
        run_batch(list(prefix), [list(argv[3:]) for argv in commands], what="tc", force=force)
    except BatchError as exc:
        raise _explain_tc(NetworkSetupError(str(exc)), commands[exc.index]) from None


def _explain_tc(exc: NetworkSetupError, argv: tuple[str, ...]) -> Exception:
    msg = str(exc)
    if "kind is unknown" in msg or "Unknown qdisc" in msg:
        kind = next((a for a in argv if a in _KNOWN_KINDS), "?")
        return KernelFeatureError(f"this kernel has no qdisc '{kind}' (module sch_{kind}); "
                                  "run with --runtime auto (the router runtime) or --runtime vm to use a VM with a stock kernel")
    return exc


_KNOWN_KINDS = ("netem", "htb", "tbf", *qdisc_kinds())  # the shapers and every leaf kind of qdisc/kinds.toml
