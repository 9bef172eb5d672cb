"""``doctor`` lists only what the product uses: every tool and kernel feature line has a caller."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from nest_experiments.config import qdisc_kinds
from nest_experiments.net import kernel
from nest_experiments.runs import doctor as doctor_mod

PACKAGE = Path(doctor_mod.__file__).resolve().parents[1]


def _package_sources() -> str:
    """Every module of the package except the two that only list tools."""
    skip = {Path(kernel.__file__).resolve(), Path(doctor_mod.__file__).resolve()}
    return "\n".join(p.read_text() for p in sorted(PACKAGE.rglob("*.py")) if p not in skip)


@pytest.mark.parametrize("name", sorted(kernel.TOOLS))
def test_every_tool_doctor_lists_is_run_by_the_package(name: str) -> None:
    exe = kernel.TOOLS[name][0]
    sources = _package_sources()
    # an argv element ("iperf3", ...), a require_tool("cc", ...), or the qemu binary's constant
    assert re.search(rf"[\"']{re.escape(exe)}[\"']", sources), f"doctor lists {exe!r}, which nothing runs"


def test_doctor_lists_none_of_the_features_that_do_not_exist() -> None:
    assert not {"gpac", "ffmpeg", "nft"} & set(kernel.TOOLS)
    assert not {"nftables", "tbf"} & set(kernel.FEATURES)


def test_every_kernel_feature_is_one_an_experiment_can_need() -> None:
    needed = {"veth", "htb", "netem", "mptcp", "ifb", "ingress", *qdisc_kinds()}  # ifb, ingress: firewalls' shape
    assert set(kernel.FEATURES) == needed


def test_doctor_without_root_prints_only_the_listed_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_mod.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(doctor_mod.shutil, "which", lambda exe: None)
    out = io.StringIO()
    assert doctor_mod.doctor(out) == 1
    text = out.getvalue()
    tools = text[text.index("tools:\n"):text.index("DASH players")]
    tool_lines = [line for line in tools.splitlines() if line.startswith("  NO ")]
    assert [line.split()[1] for line in tool_lines] == list(kernel.TOOLS)
    for absent in ("ffmpeg", "firewall", "real media"):
        assert absent not in text
    assert "run as root" in text


def test_doctor_says_which_players_run_here_and_how_to_get_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.dash import players

    monkeypatch.setattr(players.shutil, "which", lambda name: "/usr/bin/chromium" if name == "chromium" else None)
    out = io.StringIO()
    doctor_mod._players_report(out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "DASH players (apps.NAME.player):"
    assert lines[1].startswith("  ok  nest ")
    assert lines[3] == f"  NO  firefox    missing: {players.FIREFOX_HINT}"
    assert lines[4] == f"  NO  gpac       missing: {players.GPAC_HINT}"
    assert lines[2].startswith("  ok  dashjs ") == (players.dashjs_file() is not None)


def test_doctor_no_vm_trusts_qemu_without_booting_a_guest(monkeypatch: pytest.MonkeyPatch) -> None:
    """``doctor --no-vm`` on a kernel without pie: the VM runtime is named, unchecked, and no guest is booted."""
    monkeypatch.setattr(doctor_mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(doctor_mod, "probe_feature", lambda name: kernel.Probe(name not in doctor_mod.AQM, "probed"))
    monkeypatch.setattr(doctor_mod.shutil, "which", lambda exe: f"/usr/bin/{exe}")

    def no_boot() -> None:
        raise AssertionError("--no-vm booted a guest")

    monkeypatch.setattr("nest_experiments.vm.probe", no_boot)
    out = io.StringIO()
    assert doctor_mod.doctor(out, probe_vm=False) == 0
    text = out.getvalue()
    assert "VM runtime: qemu is installed (not probed: --no-vm)\n" in text
    assert "experiments run on: the router runtime (this kernel lacks pie, fq_pie, netem, qdiscs only" in text
    assert "not checked: doctor without --no-vm boots a guest" in text
