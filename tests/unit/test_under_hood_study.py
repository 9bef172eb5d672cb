"""The under-the-hood study on synthetic samples and run folders: statistics, claim verdicts, fairness, report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis import stats
from nest_experiments.rundir import RunFolder, write_csv
from nest_experiments.studies import STUDIES, study_for
from nest_experiments.studies.under_hood import claims as uc
from nest_experiments.studies.under_hood import metrics as uh
from nest_experiments.studies.under_hood.report import write_report
from tests.unit.claims_alone import each_alone


def _s(transport: str, latency: float, tp: float | None = 10e6, *, stream: str = "objects", server: str = "caddy",
       pause: float | None = 0.5, session: str = "r/1") -> uh.Sample:
    return uh.Sample(run="r", transport=transport, server=server, stream=stream, session=session, pause_s=pause,
                     throughput_bps=tp, latency_s=latency)


def _spread(rng: random.Random, centre: float, n: int = 30, rel: float = 0.1) -> list[float]:
    return [centre * rng.uniform(1 - rel, 1 + rel) for _ in range(n)]


def test_quantile_is_linear_interpolation() -> None:
    assert stats.quantile([1, 2, 3, 4], 0.5) == 2.5 and stats.quantile([1, 2, 3, 4, 5], 0.75) == 4.0


def _dash(server: str, audio_h3: float, rng: random.Random) -> list[uh.Sample]:
    out = []
    for t in uh.TRANSPORTS:
        out += [_s(t, v, 3e6, stream="video", server=server, pause=None) for v in _spread(rng, 0.05)]
        centre = audio_h3 if t == "h3" else 0.02
        out += [_s(t, v, 1e6, stream="audio", server=server, pause=None) for v in _spread(rng, centre)]
    return out


def test_fairness_per_session_jain_and_ratio() -> None:
    samples = [_s("tcp", 0.01, 10e6, stream="s1", session="a"), _s("tcp", 0.01, 10e6, stream="s2", session="a"),
               _s("h3", 0.01, 30e6, stream="s1", session="b"), _s("h3", 0.01, 10e6, stream="s2", session="b"),
               _s("h3", 0.01, 10e6, stream="objects", session="c")]
    fair = {f.session: f for f in uh.fairness(samples)}
    assert set(fair) == {"a", "b"}  # one stream: no fairness
    assert fair["a"].jain == 1.0 and fair["b"].jain == pytest.approx(1600 / 2000) and fair["b"].ratio == pytest.approx(1 / 3)


def test_samples_overlapping_a_saturated_second_are_left_out() -> None:
    a = uh.Sample(**{**_s("tcp", 0.01).__dict__, "t_request": 2.0, "t_last_byte": 2.5})
    b = uh.Sample(**{**_s("tcp", 0.01).__dict__, "t_request": 3.2, "t_last_byte": 3.9})
    assert uh.clean([a, b], [3.0]) == [b]  # (2, 3] overlaps a; b starts after it
    assert uh.clean([a, b], [4.5]) == [a]  # (3.5, 4.5] overlaps b
    assert uh.clean([a, b], []) == [a, b]


def test_segment_sample_uses_the_design_definitions() -> None:
    row = {"stream": "audio", "bytes": "1000", "t_request": "1.0", "t_first_byte": "1.2", "t_last_byte": "1.4",
           "transport": "h3"}
    s = uh.segment_sample("r", "nest", row)
    assert s is not None and s.latency_s == pytest.approx(0.2) and s.throughput_bps == pytest.approx(8000 / 0.2)
    assert uh.segment_sample("r", "nest", {**row, "t_first_byte": ""}) is None


def _run(folder: Path, name: str, transport: str, rows: list[dict[str, object]], *,
         saturated: tuple[float, ...] = (), block: int = 1) -> None:
    d = folder / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "cpu_saturated_windows": len(saturated),
                                                 "warnings": [], "repetition": block}))
    (d / "cpu.csv").write_text("t,busy\n1.0,0.2\n" + "".join(f"{t},0.97\n" for t in saturated))
    (d / "config.toml").write_text(f'[experiment]\nname = "under_hood_objects"\n[apps.objects]\nkind = "objects"\n'
                                   f'transport = "{transport}"\nhttp_server = "caddy"\npause = "500ms"\nseed = {block}\n')
    head = ["session", "stream", "index", "path", "size", "status", "bytes", "t_request", "t_first_byte",
            "t_last_byte", "throughput_bps", "latency_s", "transport", "app"]
    lines = [",".join(head)] + [",".join(str(r[h]) for h in head) for r in rows]
    (d / "objects.csv").write_text("\n".join(lines) + "\n")


def _rows(transport: str, latency: float, n: int = 6, tput: float = 8e5) -> list[dict[str, object]]:
    return [{"session": 1, "stream": "objects", "index": i, "path": "/o", "size": 1000, "status": 200, "bytes": 1000,
             "t_request": i, "t_first_byte": i + latency, "t_last_byte": i + latency + 0.01,
             "throughput_bps": tput * (1 + i / 10), "latency_s": latency * (1 + i / 10), "transport": transport,
             "app": "objects"} for i in range(n)]


def test_the_study_reports_an_objects_sweep_from_its_run_folders(tmp_path: Path) -> None:
    _run(tmp_path, "transport-tcp_r1", "tcp", _rows("tcp", 0.010))
    _run(tmp_path, "transport-h3_r1", "h3", _rows("h3", 0.004))
    _run(tmp_path, "transport-h3_r2", "h3", _rows("h3", 9.0, n=2), saturated=(1.5, 11.0))  # overlapping: left out
    assert study_for(tmp_path) is STUDIES["under_hood"]
    loaded = uh.load(tmp_path)
    assert loaded.runs == 3 and loaded.excluded == ("transport-h3_r2: 2 of 2",) and len(loaded.samples) == 12
    written = write_report(tmp_path, tmp_path / "report")
    md = (tmp_path / "report" / uh.REPORT_FILE).read_text()
    assert "objects_cdf.png" in md and "transport-h3_r2" in md and "all sessions pooled" in md
    assert "## The paper's claims, judged per session" in md and "objects_latency_lower_h3" in md
    assert "U p" not in md  # no test on the pooled objects of a few sessions
    assert "too few" in md  # one pair: no claim is decided
    assert all(p.exists() for p in written) and len(written) == 2


def test_the_report_reads_another_sweeps_folder_as_one_of_its_experiments(tmp_path: Path) -> None:
    from nest_experiments.studies.under_hood.report import main

    _run(tmp_path, "a_r1", "tcp", _rows("tcp", 0.010))
    _run(tmp_path, "b_r1", "h3", _rows("h3", 0.004))
    (tmp_path / "a_r1" / "config.toml").write_text('[experiment]\nname = "mine"\n[apps.x]\nkind = "objects"\n')
    (tmp_path / "b_r1" / "config.toml").write_text('[experiment]\nname = "mine"\n[apps.x]\nkind = "objects"\n')
    assert study_for(tmp_path) is STUDIES["generic"]
    assert main([str(tmp_path), "--as", "objects"]) == 0
    md = (tmp_path / "report" / "under_hood" / uh.REPORT_FILE).read_text()
    assert "# Under the hood: under_hood_objects" in md and "objects_throughput_similar" in md


def test_overlap_jain_weights_concurrent_objects_of_different_streams() -> None:
    def obj(stream: str, t0: float, t1: float, tp: float) -> uh.Sample:
        return uh.Sample(**{**_s("h3", 0.0, tp, stream=stream).__dict__, "t_request": t0, "t_last_byte": t1})

    # s1 alone for 1 s, then s1 and s2 together for 2 s at 30 vs 10 Mbit/s, then s2 with another s1 object, 1 s, equal
    group = [obj("s1", 0, 3, 30e6), obj("s2", 1, 4, 10e6), obj("s1", 3, 5, 10e6)]
    jain, both = uh.overlap_jain(group)
    assert both == pytest.approx(3.0)
    assert jain == pytest.approx((2 * 0.8 + 1 * 1.0) / 3)
    assert uh.overlap_jain([obj("s1", 0, 1, 5e6), obj("s1", 0.5, 2, 5e6)]) == (None, 0.0)  # one stream: none




def _seg(transport: str, stream: str, i: int, latency: float, tp: float) -> uh.Sample:
    return uh.Sample(run="r", transport=transport, server="caddy", stream=stream, session="r", pause_s=None,
                     throughput_bps=tp, latency_s=latency, t_request=float(i), t_last_byte=i + 1.0)


def test_metrics_of_a_dash_session_median_q75_and_the_audio_video_gap() -> None:
    samples = [_seg("h3", "video", i, 0.010 * (i + 1), 2e6 * (i + 1)) for i in range(4)]
    samples += [_seg("h3", "audio", i, 0.100 * (i + 1), 1e5) for i in range(4)]
    m = uc.metrics_of(samples)
    assert m["video_latency_median_ms"] == pytest.approx(25.0) and m["video_throughput_median_mbps"] == pytest.approx(5.0)
    assert m["video_latency_q75_ms"] == pytest.approx(32.5) and m["audio_latency_median_ms"] == pytest.approx(250.0)
    assert m["av_gap_ms"] == pytest.approx(225.0) and m["latency_median_ms"] == pytest.approx(70.0)
    assert "jain" not in m  # one stream each: no fairness


def test_the_latency_throughput_correlation_of_a_session_is_spearmans_rho_of_its_video_segments() -> None:
    """Fig. 7 within a session: a late segment also a slow one (TCP, as the paper says) gives rho near -1; under 8
    video segments there is no rho; audio segments do not count."""
    slow_late = [_seg("tcp", "video", i, 0.01 * (i + 1), 8e6 / (i + 1)) for i in range(10)]
    audio = [_seg("tcp", "audio", i, 0.01 * (i + 1), 1e5 * (i + 1)) for i in range(10)]
    assert uc.metrics_of(slow_late + audio)["video_latency_tput_rho"] == pytest.approx(-1.0)
    assert uc.metrics_of(slow_late[:7] + audio)["video_latency_tput_rho"] is None
    assert stats.rank_correlation([1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 6, 8, 10, 12, 14, 16]) == pytest.approx(1.0)
    assert stats.rank_correlation([1.0] * 8, list(range(8))) is None  # no spread: no correlation
    assert stats.rank_correlation([1, 2, float("nan"), 4, 5, 6, 7, 8], list(range(8))) is None  # 7 finite pairs


def test_metrics_of_two_parallel_streams_include_jain() -> None:
    samples = [_s("h3", 0.01, 30e6, stream="s1"), _s("h3", 0.01, 10e6, stream="s2")]
    m = uc.metrics_of(samples)
    assert m["jain"] == pytest.approx(0.8) and m["latency_median_ms"] == pytest.approx(10.0)


def test_session_metrics_and_cell_of_read_one_run_folder(tmp_path: Path) -> None:
    _run(tmp_path, "transport-h3_r2", "h3", _rows("h3", 0.004), block=2)
    run = RunFolder(tmp_path / "transport-h3_r2")
    m = uc.session_metrics(run)
    assert m["latency_median_ms"] == pytest.approx(4.0 * 1.25) and m["throughput_median_mbps"] == pytest.approx(1.0)
    assert uc.cell_of(run.config()) == {"experiment": "under_hood_objects", "transport": "h3", "server": "caddy",
                                        "pause_s": 0.5}
    assert uc.session_metrics(RunFolder(tmp_path / "nothing")) == {}


def _objects_sweep(folder: Path, *, blocks: int, h3_latency: float) -> None:
    rng = random.Random(7)
    for b in range(1, blocks + 1):
        base = rng.uniform(0.008, 0.012)  # the block's objects: the same for both transports
        _run(folder, f"transport-tcp_r{b}", "tcp", _rows("tcp", base, tput=8e5 * rng.uniform(0.99, 1.01)), block=b)
        _run(folder, f"transport-h3_r{b}", "h3", _rows("h3", base * h3_latency, tput=8e5 * rng.uniform(0.99, 1.01)),
             block=b)


def test_a_planted_effect_agrees_per_session_and_its_absence_does_not(tmp_path: Path) -> None:
    """QUIC's objects come 30 % sooner in every one of 8 sessions, at the same throughput: both object claims
    agree; with QUIC 30 % later, the latency claim is contradicted."""
    study = STUDIES["under_hood"]
    _objects_sweep(tmp_path / "lower", blocks=8, h3_latency=0.7)
    verdicts = {v.claim.id: v for v in each_alone(study, tmp_path / "lower")}
    assert set(verdicts) == {"objects_throughput_similar", "objects_latency_lower_h3"}  # the objects' claims only
    assert verdicts["objects_latency_lower_h3"].verdict == seq.AGREES
    assert verdicts["objects_latency_lower_h3"].n_pairs == 8
    assert verdicts["objects_throughput_similar"].verdict == seq.AGREES
    _objects_sweep(tmp_path / "higher", blocks=8, h3_latency=1.3)
    higher = {v.claim.id: v.verdict for v in each_alone(study, tmp_path / "higher")}
    assert higher["objects_latency_lower_h3"] == seq.CONTRADICTS


SEGMENT_FIELDS = ("stream", "index", "level", "bitrate_bps", "bytes", "t_request", "t_first_byte", "t_last_byte",
                  "buffer_s", "stall_s", "transport", "app")


def _dash_run(folder: Path, *, server: str, transport: str, abr: str, block: int, audio_wait_s: float) -> None:
    """One DASH session: 6 video and 6 audio segments; audio's first byte ``audio_wait_s`` after video's."""
    d = folder / f"abr-{abr}_transport-{transport}_server-{server}_r{block}"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "repetition": block, "warnings": []}))
    (d / "config.toml").write_text(
        f'[experiment]\nname = "under_hood_dash"\n[links.bottleneck.forward]\ntrace = {{ generator = "fcc", '
        f'seed = {block} }}\n[apps.video]\nkind = "dash"\ntransport = "{transport}"\nhttp_server = "{server}"\n'
        f'abr = "{abr}"\n')
    rows = []
    level = 0.05 * (1 + block / 10) * (1.2 if abr == "bola" else 1.0)  # each trace and ABR its own latency
    for i in range(6):
        t = 4.0 * i
        for stream, wait, size in (("video", level, 500_000), ("audio", level + audio_wait_s, 32_000)):
            rows.append({"stream": stream, "index": i, "level": 0, "bitrate_bps": 1_000_000, "bytes": size,
                         "t_request": t, "t_first_byte": t + wait * (1 + i / 20), "t_last_byte": t + wait + 1.0,
                         "buffer_s": 4.0, "stall_s": 0.0, "transport": transport, "app": "video"})
    write_csv(d / "segments.csv", SEGMENT_FIELDS, rows)


def test_a_planted_audio_wait_on_quic_agrees_for_that_origin_only(tmp_path: Path) -> None:
    """Caddy: over h3 audio's first byte comes 200 ms after video's (over tcp 10 ms); our server: no wait on
    either. 3 blocks x 2 ABRs = 6 pairs per origin, each pair one trace and ABR."""
    for block in (1, 2, 3):
        for abr in ("bba", "bola"):
            for transport in ("tcp", "h3"):
                _dash_run(tmp_path, server="caddy", transport=transport, abr=abr, block=block,
                          audio_wait_s=0.2 + 0.01 * block if transport == "h3" else 0.01)
                _dash_run(tmp_path, server="nest", transport=transport, abr=abr, block=block, audio_wait_s=0.01)
    v = {x.claim.id: x for x in each_alone(STUDIES["under_hood"], tmp_path)}
    assert v["dash_caddy_audio_waits_behind_video_h3"].verdict == seq.AGREES
    assert v["dash_caddy_audio_waits_behind_video_h3"].n_pairs == 6
    assert v["dash_caddy_audio_latency_higher_h3"].verdict == seq.AGREES
    assert v["dash_nest_audio_waits_behind_video_h3"].verdict != seq.AGREES  # no effect planted: not "agrees"
    assert v["dash_nest_video_throughput_similar"].verdict == seq.AGREES  # the same segments over both
