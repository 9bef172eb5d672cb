"""What the running kernel and this machine can do (used by ``doctor`` and ``run``).

Kernel features are probed in a throw-away, unnamed network namespace
(``unshare --net``), so probing never leaves anything behind and never
touches the host's interfaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

from nest_experiments.config import Experiment, qdisc_kinds
from nest_experiments.errors import KernelFeatureError

_QDISC_PROBE = ["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:"]

#: feature -> (probe argv run in a fresh netns, what provides it): what experiments can ask for
#: (the link shaper, the qdisc kinds of ``qdisc/kinds.toml``, MPTCP)
FEATURES: dict[str, tuple[list[str], str]] = {
    "veth": (["ip", "link", "add", "va", "type", "veth", "peer", "name", "vb"], "CONFIG_VETH (veth)"),
    "htb": (_QDISC_PROBE + ["htb"], "sch_htb"),
    "netem": (_QDISC_PROBE + ["netem", "delay", "1ms"], "sch_netem"),
    # every leaf kind of qdisc/kinds.toml, probed with its defaults (or the arguments its record gives)
    **{k.name: (_QDISC_PROBE + [k.name, *k.probe], k.module) for k in qdisc_kinds().values()},
    "mptcp": (["ip", "mptcp", "limits", "show"], "CONFIG_MPTCP"),
    # firewalls with action = "shape" (nest_experiments.net.fwshape); its u32 filter and mirred action cannot be
    # probed with one command: a kernel without them fails at the filter, naming it
    "ifb": (["ip", "link", "add", "fwprobe", "type", "ifb"], "CONFIG_IFB (ifb)"),
    "ingress": (["tc", "qdisc", "add", "dev", "lo", "handle", "ffff:", "ingress"], "sch_ingress"),
}

IPROUTE2_VERSION = ("tc", "-V")  # what the manifest names as iproute2's version

#: tool -> (executable, Debian/Ubuntu package, needed by): only programs the product runs
TOOLS: dict[str, tuple[str, str, str]] = {
    "ip/tc": ("tc", "iproute2", "everything"),
    "iperf3": ("iperf3", "iperf3", "iperf3 apps"),
    "sipp": ("sipp", "sip-tester", "VoIP background traffic"),
    "httperf": ("httperf", "httperf", "HTTP background traffic"),
    "cc": ("cc", "gcc libc6-dev", "httperf apps (builds their select-wait library)"),
    "caddy": ("caddy", "caddy", "the Caddy web server option"),
    "webfsd": ("webfsd", "webfs", "the webfs DASH origin (http_server = \"webfs\": the ABR letter's TCP server)"),
    "nginx": ("nginx", "nginx", "httperf apps' web server"),
    "qemu": ("qemu-system-x86_64", "qemu-system-x86", "the VM runtime"),
    "tcpdump": ("tcpdump", "tcpdump", "capture-based queue delay"),
}


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str


@cache
def probe_feature(name: str) -> Probe:
    argv, provider = FEATURES[name]
    if shutil.which(argv[0]) is None:
        return Probe(False, f"cannot probe: {argv[0]} missing")
    try:
        proc = subprocess.run(["unshare", "--net", "--", *argv], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(False, f"probe failed: {exc}")
    if proc.returncode == 0:
        return Probe(True, provider)
    return Probe(False, f"missing {provider}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['?']}")


def features_needed(exp: Experiment) -> dict[str, str]:
    """Kernel feature -> the config key that needs it."""
    need: dict[str, str] = {"veth": "experiment.topology"}
    for link in exp.links:
        for direction, e in (("forward", link.forward), ("reverse", link.reverse)):
            where = f"links.{link.name}.{direction}"
            if e.rate_bps is not None:
                need.setdefault("htb", f"{where}.rate")
            if e.needs_netem:
                need.setdefault("netem", f"{where}.delay")
            if e.qdisc is not None:
                need.setdefault(e.qdisc.kind, f"{where}.qdisc.kind")
    for fw in exp.firewalls:
        if fw.action == "shape":
            for feature in ("ifb", "ingress", "htb", "pfifo"):
                need.setdefault(feature, f"firewalls.{fw.name}.action")
    for app in exp.apps:
        for feature in getattr(app, "kernel_features", ()):
            need.setdefault(feature, f"apps.{app.name}")
    return need


def missing_on_host(exp: Experiment) -> dict[str, str]:
    """Features the experiment needs that this kernel lacks: feature -> config key."""
    return {f: key for f, key in features_needed(exp).items() if f in FEATURES and not probe_feature(f).ok}


def require_host_features(exp: Experiment) -> None:
    missing = missing_on_host(exp)
    if missing:
        feature, key = next(iter(missing.items()))
        module = FEATURES[feature][1]
        others = f" (also missing: {', '.join(list(missing)[1:])})" if len(missing) > 1 else ""
        raise KernelFeatureError(f"{key}: this kernel has no '{feature}' ({module}){others}; "
                                 "use --runtime auto (the router runtime: the links that need it through a VM with a "
                                 "stock kernel) or --runtime vm (the whole experiment in that VM)")


def kernel_release() -> str:
    return os.uname().release
