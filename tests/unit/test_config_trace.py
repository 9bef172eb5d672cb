"""``trace`` on a link direction: the forms it takes, where files are found, how it meets ``rate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config import EgressConfig, parse_experiment, read_toml
from nest_experiments.config.sweep import expand
from nest_experiments.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data"


def egress(links: dict[str, Any], direction: str = "forward") -> EgressConfig:
    exp = parse_experiment({"experiment": {"name": "t", "duration": "10s"}, "links": {"bottleneck": links}})
    return getattr(exp.link("bottleneck"), direction)  # type: ignore[no-any-return]


def test_a_generator_starts_the_htb_class_at_its_first_rate_and_keeps_the_leaf() -> None:
    e = egress({"qdisc": {"kind": "pie", "target": "5ms"}, "forward": {"trace": {"generator": "dvl", "seed": 3}}})
    assert e.rate_bps == 64_000 and e.qdisc is not None and e.qdisc.kind == "pie"
    assert e.trace is not None and e.trace.source == "dvl(seed=3)" and e.trace_step_s == 0.1
    assert e.trace_steps(200)[:4] == ((0.0, 64_000), (60.0, 128_000), (120.0, 192_000), (180.0, 256_000))


def test_a_trace_at_a_more_specific_level_replaces_the_topologys_rate() -> None:
    fwd = egress({"trace": [["0s", "2mbit"], ["2s", "1mbit"]], "trace_step": "500ms"})
    rev = egress({"trace": [["0s", "2mbit"], ["2s", "1mbit"]], "reverse": {"rate": "5mbit"}}, "reverse")
    assert fwd.rate_bps == 2_000_000 and fwd.trace_step_s == 0.5 and fwd.trace_steps(4) == ((0.0, 2_000_000), (2.0, 1_000_000))
    assert rev.rate_bps == 5_000_000 and rev.trace is None  # the direction's rate wins over the link's trace
    assert egress({}).trace is None and egress({}).rate_bps == 10_000_000  # dumbbell's default rate


def test_scales_compress_time_and_multiply_rates() -> None:
    e = egress({"forward": {"trace": {"generator": "dvl", "time_scale": 0.1, "rate_scale": 10}}})
    assert e.trace_steps(13) == ((0.0, 640_000), (6.0, 1_280_000), (12.0, 1_920_000))


def test_a_file_is_found_next_to_the_experiment_file_then_in_the_project(tmp_path: Path) -> None:
    (tmp_path / "here.csv").write_text("0,3mbit\n")
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text('[experiment]\nname = "t"\nduration = "10s"\n[links.bottleneck.forward]\ntrace = "here.csv"\n'
                        '[links.bottleneck.reverse]\ntrace = { file = "tests/data/traces/steps.csv" }\n'
                        '[sweep]\n"links.bottleneck.forward.trace" = ["here.csv", { generator = "dh" }]\n')
    runs = expand(read_toml(exp_file))
    assert [r.experiment.link("bottleneck").forward.rate_bps for r in runs] == [3_000_000, 1_152_000]
    assert runs[0].experiment.raw["links"]["bottleneck"]["forward"]["trace"] == str(tmp_path / "here.csv")
    reverse = runs[0].experiment.link("bottleneck").reverse
    assert reverse.trace_steps(8) == ((0.0, 2_000_000), (2.0, 1_000_000), (4.0, 3_000_000), (6.0, 2_000_000))


@pytest.mark.parametrize(("links", "key", "what"), [
    ({"forward": {"trace": "no/such.trace"}}, "links.bottleneck.forward.trace", "no such trace file"),
    ({"forward": {"trace": "tests/data/traces/decreasing.trace"}}, "links.bottleneck.forward.trace",
     "decreasing.trace:4: time stamp 7 ms is before"),
    ({"forward": {"trace": {"generator": "dvl", "file": "x"}}}, "links.bottleneck.forward.trace", "exactly one of"),
    ({"forward": {"trace": {}}}, "links.bottleneck.forward.trace", "exactly one of"),
    ({"forward": {"trace": {"schedule": [["0s", "1mbit"]], "seed": 2}}}, "links.bottleneck.forward.trace.seed",
     "only a generator"),
    ({"forward": {"trace": {"generator": "dh", "speed": 2}}}, "links.bottleneck.forward.trace.speed", "unknown key"),
    ({"forward": {"trace": {"generator": "dh", "time_scale": 0}}}, "links.bottleneck.forward.trace.time_scale",
     "factor"),
    ({"forward": {"trace": [["0s", "1mbit"]], "trace_step": "1ms"}}, "links.bottleneck.forward.trace_step", "10ms"),
    ({"forward": {"trace_step": "1s"}}, "links.bottleneck.forward.trace_step", "without a trace"),
    ({"forward": {"trace": [["0s", "1mbps"]]}}, "links.bottleneck.forward.trace[0]", "bytes/s"),
    ({"trace": 5}, "links.bottleneck.trace", "expected a table"),
])  # fmt: skip
def test_bad_traces_name_the_key(links: dict[str, Any], key: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as err:
        egress(links)
    assert err.value.path == key and "\n" not in str(err.value)
