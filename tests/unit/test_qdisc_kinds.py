"""qdisc/kinds.toml as records (config.qdiscs): what every layer derives from them, the checks of the file, and a
choice parameter (CAKE's) from the config to tc's argv and its read-back keys."""

from __future__ import annotations

import fnmatch

import pytest

from nest_experiments.analysis.results import NOT_AQM
from nest_experiments.config import EgressConfig, QdiscConfig
from nest_experiments.config.core import parse_qdisc
from nest_experiments.config.qdiscs import aqm_kinds, fifo_kinds, kinds_from, qdisc_kinds
from nest_experiments.errors import ConfigError
from nest_experiments.net import kernel, network, routed, tcplan
from nest_experiments.parsers.tcstats import xstats_layouts
from nest_experiments.vm import image


def test_the_shipped_kinds_split_into_fifos_and_aqms() -> None:
    assert fifo_kinds() == ("pfifo", "bfifo")
    assert set(aqm_kinds()) == {"pie", "fq_pie", "fq_codel", "codel", "cake"}
    assert set(fifo_kinds()) <= NOT_AQM and not set(aqm_kinds()) & NOT_AQM


def test_every_layer_knows_every_kind_from_its_record() -> None:
    for k in qdisc_kinds().values():
        argv, module = kernel.FEATURES[k.name]
        assert argv[-1 - len(k.probe)] == k.name and module == k.module  # the kernel probe
        assert k.name in routed.ROUTABLE and k.name in network._KNOWN_KINDS
        # the guest image carries its module: preloaded, or one of the sched modules copied in (sch_fifo is built in)
        path = f"kernel/net/sched/{k.module}.ko"
        assert k.module == "sch_fifo" or k.module in image.PRELOAD_MODULES or \
            any(fnmatch.fnmatch(path, p) for p in image.INCLUDE_PATTERNS), k.name


def test_xstats_layouts_point_inside_their_structs() -> None:
    layouts = xstats_layouts()
    assert set(layouts) == {"pie", "fq_pie", "fq_codel", "codel"}  # CAKE's stats are nested attributes: none
    for kind, x in layouts.items():
        n = len(x.layout.unpack(bytes(x.layout.size)))
        for index in (x.ecn_mark, x.delay_us, x.prob, x.type_word):
            assert index is None or 0 <= index < n, (kind, index, n)
    assert layouts["pie"].layout.format == "=QIIIIIIII"


def test_a_bad_kinds_file_names_the_key() -> None:
    good = {"module": "sch_pie", "params": {"target": {"type": "time", "tc": "target", "readback": "target"}}}
    assert kinds_from({"pie": good})["pie"].params["target"].tc == "target"
    for bad, key, words in (
            ({"module": "pie"}, "[x] module", "sch_"),
            ({"module": "sch_x", "params": {"a": {"type": "float", "tc": "a", "readback": "a"}}}, "params.a", "type"),
            ({"module": "sch_x", "params": {"a": {"type": "int", "tc": "a"}}}, "params.a", "readback"),
            ({"module": "sch_x", "params": {"a": {"type": "choice", "tc": "", "readback": "a"}}}, "params.a",
             "choices"),
            ({"module": "sch_x", "params": {"a": {"type": "int", "readback": "a", "choices": ["b"]}}}, "params.a",
             "choices")):
        with pytest.raises(ConfigError, match=words) as exc:
            kinds_from({"x": bad})
        assert key in str(exc.value) and "kinds.toml" in str(exc.value)


def test_a_choice_parameter_goes_to_tc_as_its_word_and_reads_back_by_its_key() -> None:
    q = parse_qdisc("links.l.forward.qdisc", {"kind": "cake", "diffserv": "diffserv4", "flowmode": "dual-dsthost",
                                              "rtt": "50ms", "nat": False, "wash": True})
    assert tcplan.qdisc_args(q) == ["cake", "diffserv4", "dual-dsthost", "rtt", "50000us", "nonat", "wash"]
    plan = tcplan.plan_egress("ns", "r2", EgressConfig(rate_bps=10**7, qdisc=q))
    assert dict(plan.qdiscs[-1].options) == {"diffserv": "diffserv4", "flowmode": "dual-dsthost", "rtt": 50000,
                                             "nat": False, "wash": True}
    with pytest.raises(ConfigError, match="links.l.forward.qdisc.diffserv") as exc:
        parse_qdisc("links.l.forward.qdisc", {"kind": "cake", "diffserv": "diffserv5"})
    assert "diffserv4" in str(exc.value)  # the words it takes
    assert QdiscConfig(kind="cake").params == ()
