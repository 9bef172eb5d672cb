"""The adapter: the only module that talks to NeST, netlink and iproute2.

:class:`Network` realises a pure :class:`~nest_experiments.topology.TopologySpec`
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
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from nest_experiments import tcplan
from nest_experiments import topology as topo
from nest_experiments.config import LinkConfig
from nest_experiments.errors import KernelFeatureError, MissingToolError, NetworkSetupError
from nest_experiments.procs import RunState, check_run, kill_namespace_processes, list_root_ifnames

NEST_TC_DIR = Path("/usr/lib/tc")
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


@dataclass(frozen=True, kw_only=True)
class Egress:
    """A configured egress, for samplers: node, interface, namespace, plan."""

    link: str
    node: str
    peer: str
    dev: str
    ns: str
    plan: tcplan.EgressPlan


class Network:
    """A realised topology. Use as a context manager."""

    def __init__(self, spec: topo.TopologySpec, links: tuple[LinkConfig, ...] = (), *, state: RunState,
                 congestion_control: str = "cubic") -> None:
        self.spec = spec
        self.links = links
        self.state = state
        self.cc = congestion_control
        self.egresses: list[Egress] = []

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
        ifnames = sorted({link.ifname(n) for link in self.spec.links for n in (link.a, link.b)})
        clash = sorted(set(ifnames) & set(list_root_ifnames()))
        if clash:
            raise NetworkSetupError(f"interfaces {', '.join(clash)} already exist in the root namespace; "
                                    "rename them or the topology's nodes")
        self.state.namespaces = [self.ns(n) for n in self.spec.nodes]
        self.state.root_ifnames = ifnames
        self.state.save()  # before creating anything: a later run can clean up after us
        self._allow_congestion_control()
        self._create_with_nest()
        self._configure_nodes()
        self.verify_topology()
        self._apply_links()

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
        for ns in self.state.namespaces:
            kill_namespace_processes(ns)
        for ns in self.state.namespaces:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
        if "map" in (mods := _loaded_nest()):
            mods["map"].TopologyMap.delete_all_mapping()
        self.state.remove()

    # ------------------------------------------------------------ topology (NeST)

    def _create_with_nest(self) -> None:
        nt = nest_modules()["topology"]
        nodes = {}
        for name, role in self.spec.nodes.items():
            nodes[name] = (nt.Router if role == "router" else nt.Node)(self.ns(name))
        for link in self.spec.links:
            ia, ib = nt.connect(nodes[link.a], nodes[link.b], link.ifname(link.a), link.ifname(link.b))
            ia.set_address(str(link.address(link.a, self.spec.base)))
            ib.set_address(str(link.address(link.b, self.spec.base)))
        for route in topo.routes(self.spec):
            self._ip(route.node, ["route", "replace", str(route.dest), "via", str(route.via), "dev", route.dev])

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
        table_routes, rules = topo.source_routing(self.spec)
        for route in table_routes:
            self._ip(route.node, ["route", "replace", "default", "via", str(route.via), "dev", route.dev,
                                  "table", str(route.table)])
        for rule in rules:
            self._ip(rule.node, ["rule", "add", "from", str(rule.source), "table", str(rule.table)])
        for node, role in self.spec.nodes.items():
            self.sysctl(node, "net.ipv4.tcp_congestion_control", self.cc)
            if role == "router":
                self.sysctl(node, "net.ipv4.ip_forward", "1")
            if len(self.spec.links_of(node)) > 1:  # asymmetric paths: loose reverse-path filter
                self.sysctl(node, "net.ipv4.conf.all.rp_filter", "2")

    def _ip(self, node: str, args: list[str]) -> str:
        return check_run(["ip", "-n", self.ns(node), *args], what=f"ip on {node}")

    def sysctl(self, node: str, key: str, value: str) -> None:
        check_run(["ip", "netns", "exec", self.ns(node), "sysctl", "-q", "-w", f"{key}={value}"],
                  what=f"sysctl {key} on {node}")
        got = check_run(["ip", "netns", "exec", self.ns(node), "sysctl", "-n", key], what="sysctl read-back").strip()
        if got != value:
            raise NetworkSetupError(f"{node}: {key} is {got!r} after setting {value!r}")

    def verify_topology(self) -> None:
        """Read addresses back from the kernel: NeST ignores every failure."""
        for node in self.spec.nodes:
            shown = json.loads(self._ip(node, ["-j", "addr", "show"]))
            have = {(i["ifname"], f"{a['local']}/{a['prefixlen']}") for i in shown for a in i.get("addr_info", [])
                    if a.get("family") == "inet"}
            for link in self.spec.links_of(node):
                want = (link.ifname(node), str(link.address(node, self.spec.base)))
                if want not in have:
                    raise NetworkSetupError(f"{node}: interface {want[0]} with {want[1]} is missing after NeST set it up")

    # ------------------------------------------------------------ traffic control

    def _apply_links(self) -> None:
        for link in self.links:
            spec_link = self.spec.link(link.name)
            for node, peer, egress in link.egresses():
                dev = spec_link.ifname(node)
                if not link.offloads and (egress.shaped or _reverse(link, node).shaped):
                    self.offloads_off(node, dev)
                if egress.shaped:
                    plan = tcplan.plan_egress(self.ns(node), dev, egress)
                    self.apply_plan(plan)
                    self.egresses.append(Egress(link=link.name, node=node, peer=peer, dev=dev, ns=self.ns(node), plan=plan))

    def offloads_off(self, node: str, dev: str) -> None:
        check_run(["ip", "netns", "exec", self.ns(node), "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"],
                  what=f"ethtool on {node}/{dev}")

    def apply_plan(self, plan: tcplan.EgressPlan) -> None:
        first, *rest = plan.commands
        subprocess.run(list(first), capture_output=True, check=False)  # delete root: fails when there is none
        for argv in rest:
            try:
                check_run(argv, what="tc")
            except NetworkSetupError as exc:
                raise _explain_tc(exc, argv) from None
        self.read_back(plan)

    def read_back(self, plan: tcplan.EgressPlan) -> None:
        shown = json.loads(check_run(["tc", "-n", plan.ns, "-j", "qdisc", "show", "dev", plan.dev], what="tc read-back"))
        problems = tcplan.compare_qdiscs(plan, shown)
        if plan.htb_class:
            text = check_run(["tc", "-n", plan.ns, "class", "show", "dev", plan.dev], what="tc read-back")
            problems += tcplan.compare_rate(plan, tcplan.parse_htb_classes(text))
        if problems:
            raise NetworkSetupError("traffic control differs from the plan: " + "; ".join(problems))


def _reverse(link: LinkConfig, node: str) -> Any:
    return link.reverse if node == link.a else link.forward


def _loaded_nest() -> dict[str, ModuleType]:
    return nest_modules() if nest_modules.cache_info().currsize else {}


def _explain_tc(exc: NetworkSetupError, argv: tuple[str, ...]) -> Exception:
    msg = str(exc)
    if "kind is unknown" in msg or "Unknown qdisc" in msg:
        kind = next((a for a in argv if a in _KNOWN_KINDS), "?")
        return KernelFeatureError(f"this kernel has no qdisc '{kind}' (module sch_{kind}); "
                                  "run with --runtime vm (or auto) to use a VM with a stock kernel")
    return exc


_KNOWN_KINDS = ("pie", "fq_pie", "fq_codel", "codel", "netem", "htb", "tbf", "pfifo", "bfifo")


def host_is_root() -> bool:
    return os.geteuid() == 0
