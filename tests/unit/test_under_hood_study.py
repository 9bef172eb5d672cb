"""The under-the-hood study on synthetic samples and run folders: statistics, claim verdicts, fairness, report."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from nest_experiments.analysis import stats
from nest_experiments.studies import STUDIES, study_for
from nest_experiments.studies.under_hood import metrics as uh
from nest_experiments.studies.under_hood.report import write_report


def _s(transport: str, latency: float, tp: float | None = 10e6, *, stream: str = "objects", server: str = "caddy",
       pause: float | None = 0.5, session: str = "r/1") -> uh.Sample:
    return uh.Sample(run="r", transport=transport, server=server, stream=stream, session=session, pause_s=pause,
                     throughput_bps=tp, latency_s=latency)


def _spread(rng: random.Random, centre: float, n: int = 30, rel: float = 0.1) -> list[float]:
    return [centre * rng.uniform(1 - rel, 1 + rel) for _ in range(n)]


def test_quantile_is_linear_interpolation_and_bootstrap_is_seeded() -> None:
    assert stats.quantile([1, 2, 3, 4], 0.5) == 2.5 and stats.quantile([1, 2, 3, 4, 5], 0.75) == 4.0
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0] * 4, [3.0, 4.0, 5.0, 6.0, 7.0] * 4
    ci = uh.quantile_diff_ci(a, b)
    assert ci == uh.quantile_diff_ci(a, b) and ci is not None and ci[0] > 0
    assert uh.quantile_diff_ci(a[:3], b) is None


def test_objects_claims_similar_throughput_and_lower_quic_latency_agree() -> None:
    rng = random.Random(1)
    samples = [_s("tcp", lat, tp) for lat, tp in zip(_spread(rng, 0.010), _spread(rng, 30e6), strict=True)]
    samples += [_s("h3", lat, tp) for lat, tp in zip(_spread(rng, 0.006), _spread(rng, 30e6), strict=True)]
    tp, lat = uh.objects_claims(samples)
    assert tp.agree.startswith("yes") and lat.agree == "yes"
    assert "median tcp 10" in lat.ours or "median tcp 9" in lat.ours  # ms, with the numbers


def test_objects_claims_disagree_when_quic_is_slower_and_say_too_few() -> None:
    rng = random.Random(2)
    samples = [_s("tcp", lat, tp) for lat, tp in zip(_spread(rng, 0.005), _spread(rng, 30e6), strict=True)]
    samples += [_s("h3", lat, tp) for lat, tp in zip(_spread(rng, 0.020), _spread(rng, 15e6), strict=True)]
    tp, lat = uh.objects_claims(samples)
    assert tp.agree == "no" and lat.agree == "no"
    few = uh.objects_claims(samples[:3] + samples[-3:])
    assert all(c.agree.startswith("too few") for c in few)


def test_similar_accepts_a_significant_but_small_difference() -> None:
    c = uh.Comparison(what="x", metric="throughput_bps", a_name="tcp", b_name="h3", a=tuple(100 + i / 10 for i in range(1000)),
                      b=tuple(1.05 * (100 + i / 10) for i in range(1000)))
    assert c.p_two is not None and c.p_two < uh.ALPHA  # many samples: "different" by the U test alone
    assert uh.similar(c).startswith("yes: p < 0.05, but the medians differ by 5%")


def _dash(server: str, audio_h3: float, rng: random.Random) -> list[uh.Sample]:
    out = []
    for t in uh.TRANSPORTS:
        out += [_s(t, v, 3e6, stream="video", server=server, pause=None) for v in _spread(rng, 0.05)]
        centre = audio_h3 if t == "h3" else 0.02
        out += [_s(t, v, 1e6, stream="audio", server=server, pause=None) for v in _spread(rng, centre)]
    return out


def test_dash_claims_per_implementation_say_whether_audio_waits_behind_video() -> None:
    rng = random.Random(3)
    samples = _dash("caddy", 0.30, rng) + _dash("nest", 0.02, rng)
    by = {c.claim: c.agree for c in uh.dash_claims(samples)}
    caddy = {k: v for k, v in by.items() if k.startswith("[Caddy")}
    nest = {k: v for k, v in by.items() if k.startswith("[our server")}
    assert len(caddy) == len(nest) == 5
    audio = next(k for k in caddy if "audio segments'" in k)
    behind = next(k for k in caddy if "waits behind video" in k)
    q75 = next(k for k in caddy if "upper quartile" in k)
    assert caddy[audio] == caddy[behind] == caddy[q75] == "yes"
    assert nest[audio.replace("[Caddy (quic-go)]", "[our server (aioquic)]")] != "yes"
    assert nest[behind.replace("[Caddy (quic-go)]", "[our server (aioquic)]")] == "no"
    video_tp = next(k for k in caddy if "throughput" in k)
    assert caddy[video_tp] == "yes"


def test_parallel_claims_per_pause_and_the_gap_shrinking_with_the_pause() -> None:
    rng = random.Random(4)
    samples = []
    for pause, extra in ((0.5, 0.050), (8.0, 0.010)):
        samples += [_s("tcp", v, t, pause=pause) for v, t in zip(_spread(rng, 0.01), _spread(rng, 15e6), strict=True)]
        samples += [_s("h3", v, t, pause=pause) for v, t in
                    zip(_spread(rng, 0.01 + extra), _spread(rng, 15e6), strict=True)]
    claims = uh.parallel_claims(samples)
    assert len(claims) == 5
    assert [c.agree for c in claims[:4]] == ["yes"] * 4
    assert claims[-1].agree == "yes" and "0.5 s: +" in claims[-1].ours
    flipped = [uh.Sample(**{**s.__dict__, "pause_s": 8.5 - (s.pause_s or 0)}) for s in samples]
    assert uh.parallel_claims(flipped)[-1].agree == "no"


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
         saturated: tuple[float, ...] = ()) -> None:
    d = folder / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": "completed", "cpu_saturated_windows": len(saturated),
                                                 "warnings": []}))
    (d / "cpu.csv").write_text("t,busy\n1.0,0.2\n" + "".join(f"{t},0.97\n" for t in saturated))
    (d / "config.toml").write_text(f'[experiment]\nname = "under_hood_objects"\n[apps.objects]\nkind = "objects"\n'
                                   f'transport = "{transport}"\nhttp_server = "caddy"\npause = "500ms"\n')
    head = ["session", "stream", "index", "path", "size", "status", "bytes", "t_request", "t_first_byte",
            "t_last_byte", "throughput_bps", "latency_s", "transport", "app"]
    lines = [",".join(head)] + [",".join(str(r[h]) for h in head) for r in rows]
    (d / "objects.csv").write_text("\n".join(lines) + "\n")


def _rows(transport: str, latency: float, n: int = 6) -> list[dict[str, object]]:
    return [{"session": 1, "stream": "objects", "index": i, "path": "/o", "size": 1000, "status": 200, "bytes": 1000,
             "t_request": i, "t_first_byte": i + latency, "t_last_byte": i + latency + 0.01,
             "throughput_bps": 8e5 * (1 + i / 10), "latency_s": latency * (1 + i / 10), "transport": transport,
             "app": "objects"} for i in range(n)]


def test_the_study_reports_an_objects_sweep_from_its_run_folders(tmp_path: Path) -> None:
    _run(tmp_path, "transport-tcp_r1", "tcp", _rows("tcp", 0.010))
    _run(tmp_path, "transport-h3_r1", "h3", _rows("h3", 0.004))
    _run(tmp_path, "transport-h3_r2", "h3", _rows("h3", 9.0, n=2), saturated=(1.5, 11.0))  # overlapping: left out
    assert study_for(tmp_path) is STUDIES["under_hood"]
    loaded = uh.load(tmp_path)
    assert loaded.runs == 3 and loaded.excluded == ("transport-h3_r2: 2 of 2",) and len(loaded.samples) == 12
    claims = uh.claim_table(tmp_path)
    assert [c.agree for c in claims] == ["yes", "yes"]
    written = write_report(tmp_path, tmp_path / "report")
    md = (tmp_path / "report" / uh.REPORT_FILE).read_text()
    assert "objects_cdf.png" in md and "transport-h3_r2" in md and "| paper's claim | ours | agree? |" in md
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
    assert "# Under the hood: under_hood_objects" in md and "| object downloads: throughput similar" in md


def test_overlap_jain_weights_concurrent_objects_of_different_streams() -> None:
    def obj(stream: str, t0: float, t1: float, tp: float) -> uh.Sample:
        return uh.Sample(**{**_s("h3", 0.0, tp, stream=stream).__dict__, "t_request": t0, "t_last_byte": t1})

    # s1 alone for 1 s, then s1 and s2 together for 2 s at 30 vs 10 Mbit/s, then s2 with another s1 object, 1 s, equal
    group = [obj("s1", 0, 3, 30e6), obj("s2", 1, 4, 10e6), obj("s1", 3, 5, 10e6)]
    jain, both = uh.overlap_jain(group)
    assert both == pytest.approx(3.0)
    assert jain == pytest.approx((2 * 0.8 + 1 * 1.0) / 3)
    assert uh.overlap_jain([obj("s1", 0, 1, 5e6), obj("s1", 0.5, 2, 5e6)]) == (None, 0.0)  # one stream: none


def test_reproduces_needs_audio_later_over_quic_than_over_tcp() -> None:
    from nest_experiments.studies.under_hood.report import reproduces

    rng = random.Random(5)
    samples = _dash("caddy", 0.30, rng) + _dash("nest", 0.02, rng)
    assert reproduces(uh.dash_comparisons(samples, "caddy")).startswith("reproduced (")
    text = reproduces(uh.dash_comparisons(samples, "nest"))
    assert text.startswith("not reproduced (") and "on TCP: no" in text
    assert reproduces(uh.dash_comparisons(samples[:6], "caddy")).startswith("cannot tell")


def test_audio_behind_video_on_both_transports_is_not_quics_alone() -> None:
    rng = random.Random(6)
    samples = [uh.Sample(**{**s.__dict__, "latency_s": s.latency_s * (20 if s.stream == "audio" else 1)})
               for s in _dash("caddy", 0.02, rng)]  # audio 0.4 s on both transports, video 0.05 s
    behind = next(c for c in uh.dash_claims(samples) if "waits behind video" in c.claim)
    assert behind.agree == "yes, but over TCP too (separate connections)" and "on tcp: median video" in behind.ours
