"""Experiment files: the default and every shipped file load; bad files name their key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nest_experiments.config import load_default_raw, parse_experiment, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests/data/bad").glob("*.toml"))


def expected_key(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# error: ")
    return first.removeprefix("# error: ")


def load_all(path: Path) -> None:
    expand(read_toml(path))


def test_default_experiment_is_the_nest_papers_reduced_sweep() -> None:
    runs = expand(load_default_raw())
    assert {r.experiment.name for r in runs} == {"nest_paper"}
    cells = {(r.experiment.link("bn1").forward.qdisc, r.experiment.link("bn2").forward.qdisc) for r in runs}
    assert {(a.kind, a.param("target")) for a, b in cells if a == b} == {  # type: ignore[union-attr]
        (kind, target) for kind in ("pie", "fq_pie") for target in (0.005, 0.010, 0.015)}
    assert len(runs) == 6 * 2
    kinds = sorted(a.kind for a in runs[0].experiment.apps)
    assert kinds == ["dash", "httperf", "httperf", "iperf3", "iperf3", "sipp", "sipp"]
    bn1 = runs[0].experiment.link("bn1")
    # not below 5 Mbit/s: at 3 Mbit/s a 1500-byte packet takes 4 ms to send and PIE cannot hold a 5 ms target
    assert (bn1.forward.rate_bps, bn1.reverse.rate_bps, bn1.reverse.delay_s) == (5_000_000, 5_000_000, 0.020)
    paper = expand(apply_paper(load_default_raw()))
    assert len(paper) == 6 * 25 and paper[0].experiment.duration_s >= 184
    rates = {a.name: a.rate for a in paper[0].experiment.apps if a.kind in ("sipp", "httperf")}  # type: ignore[attr-defined]
    assert rates == {"voip1": 10, "voip3": 10, "web1": 15, "web3": 15}  # Table I


#: the runs each shipped experiment file expands to (a new file adds its line here)
SHIPPED_RUNS = {
    "abr_quic_tcp.toml": {f"abr-{abr}_transport-{transport}_trace-{trace}_r1"
                          for abr in ("bba", "bola", "mpcfast", "mpcrobust", "throughput", "dynamic")
                          for transport in ("tcp", "h3") for trace in ("fcc", "hsdpa")}
                         | {"abr-bola_transport-tcp_trace-fcc_r2", "abr-bola_transport-h3_trace-fcc_r2"},  # A/A
    "dash_mptcp.toml": {"r1"},
    "dumbbell_fifo.toml": {f"qdisc-pfifo-{limit}_r{rep}" for limit in (20, 100, 500) for rep in (1, 2)},
    "dumbbell_voip_web.toml": {"r1"},
    "pie_dumbbell.toml": {"kind-pie_r1", "kind-fqpie_r1"},
}


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_experiments_load(path: Path) -> None:
    runs = expand(read_toml(path))
    names = [run.name for run in runs]
    assert runs and len(set(names)) == len(names), "two runs share a name"
    assert all(re.fullmatch(r"([a-z0-9.-]+_)*r[1-9][0-9]*", name) for name in names), names
    assert {run.experiment.name for run in runs} == {path.stem}
    if path.name in SHIPPED_RUNS:
        assert len(runs) == len(SHIPPED_RUNS[path.name]) and set(names) == SHIPPED_RUNS[path.name]


def test_every_listed_shipped_experiment_exists() -> None:
    assert {name for name in SHIPPED_RUNS if (ROOT / "experiments" / name).is_file()} == set(SHIPPED_RUNS)


def test_there_are_at_least_ten_bad_files() -> None:
    assert len(BAD) >= 10


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_file_names_its_key(path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_all(path)
    message = str(info.value)
    assert expected_key(path) in message
    assert "\n" not in message


def test_typo_suggests_the_right_key() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'target'"):
        load_all(ROOT / "tests/data/bad/unknown_qdisc_param.toml")


def test_units_and_defaults_are_normalised() -> None:
    raw = {
        "experiment": {"name": "x", "duration": "1.5s"},
        "links": {"bottleneck": {"rate": "10mbit", "qdisc": {"kind": "pie", "target": "15ms"},
                                 "reverse": {"delay": "20ms", "qdisc": "pfifo"}}},
    }
    exp = parse_experiment(raw)
    link = exp.link("bottleneck")
    assert exp.duration_s == 1.5
    assert link.forward.rate_bps == 10_000_000 and link.reverse.rate_bps == 10_000_000
    assert link.forward.qdisc is not None and link.forward.qdisc.param("target") == pytest.approx(0.015)
    assert link.forward.delay_s == 0 and link.reverse.delay_s == pytest.approx(0.02)
    assert link.reverse.qdisc is not None and link.reverse.qdisc.kind == "pfifo"
    assert exp.sample_links == ("bottleneck",)
    assert exp.congestion_control == "cubic"


def test_rate_without_qdisc_gets_an_explicit_fifo_leaf() -> None:
    exp = parse_experiment({"experiment": {"name": "x", "duration": "1s"}})
    fwd = exp.link("bottleneck").forward  # the topology file gives the rate
    assert fwd.qdisc is not None and fwd.qdisc.kind == "pfifo"
    assert exp.link("h1_r1").forward.shaped is False


def test_nodes_table_sets_tcp_ecn_per_node_and_names_bad_keys() -> None:
    exp = parse_experiment({"experiment": {"name": "x", "duration": "1s"}, "nodes": {"h2": {"tcp_ecn": 1}}})
    assert [(n.name, n.sysctls()) for n in exp.nodes] == [("h2", {"net.ipv4.tcp_ecn": "1"})]
    assert parse_experiment({"experiment": {"name": "x", "duration": "1s"}}).nodes == ()
    with pytest.raises(ConfigError, match=r"^nodes\.h2\.tcp_ecn: expected 0 \(off\), 1 .* got 3"):
        parse_experiment({"experiment": {"name": "x", "duration": "1s"}, "nodes": {"h2": {"tcp_ecn": 3}}})
    with pytest.raises(ConfigError, match=r"^nodes\.h2\.tcp_ecn: .* got True"):
        parse_experiment({"experiment": {"name": "x", "duration": "1s"}, "nodes": {"h2": {"tcp_ecn": True}}})
    with pytest.raises(ConfigError, match=r"^nodes\.h9: no node 'h9' in topology 'dumbbell'; nodes: h1, h2"):
        parse_experiment({"experiment": {"name": "x", "duration": "1s"}, "nodes": {"h9": {"tcp_ecn": 1}}})
    with pytest.raises(ConfigError, match=r"^nodes\.h2\.ecn: unknown key"):
        parse_experiment({"experiment": {"name": "x", "duration": "1s"}, "nodes": {"h2": {"ecn": 1}}})


def test_end_when_done_is_off_unless_set_and_must_be_a_bool() -> None:
    assert parse_experiment({"experiment": {"name": "x", "duration": "1s"}}).end_when_done is False
    assert parse_experiment({"experiment": {"name": "x", "duration": "1s", "end_when_done": True}}).end_when_done
    with pytest.raises(ConfigError, match=r"^experiment\.end_when_done: "):
        parse_experiment({"experiment": {"name": "x", "duration": "1s", "end_when_done": "yes"}})
