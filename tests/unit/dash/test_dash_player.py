"""The sans-I/O player over a simulated link, and the asyncio driver with a fake fetcher."""

from __future__ import annotations

import asyncio
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
from dash_simlink import SimLink, manifest_for, run

from nest_experiments.dash.content import media
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.fetch import Fetcher, FetchResult
from nest_experiments.dash.core.player import (
    FetchAction,
    LevelChosen,
    PlaybackEnded,
    PlaybackStarted,
    PlayerConfig,
    PlayerReport,
    PlayerSession,
    SegmentReceived,
    StallEnded,
    StallStarted,
    WaitAction,
    play,
)
from nest_experiments.errors import ConfigError, RunError

SEG = 4.0


def session(algo: str = "grate", *, duration_s: float = 80.0, **config: float) -> PlayerSession:
    manifest = manifest_for("abr_quic_tcp", duration_s=duration_s)
    return PlayerSession(
        manifest,
        abr_video=create_abr(algo),
        abr_audio=create_abr("grate"),
        start_time=0.0,
        config=PlayerConfig(**config),
    )


def simulate(algo: str, steps: list[tuple[float, float]], **kw: float) -> PlayerSession:
    s = session(algo, **kw)
    run(s, SimLink(steps=steps))
    return s


def video(s: PlayerSession) -> list:
    return [r for r in s.segments if r.stream == "video"]


# ---------------------------------------------------------------- adaptation


@pytest.mark.parametrize("algo", ["grate", "throughput", "dynamic"])
def test_step_5_to_1_mbps_goes_below_1_mbps_within_three_segments(algo: str) -> None:
    s = simulate(algo, [(0.0, 5e6), (30.0, 1e6)])
    after = [r for r in video(s) if r.t_request >= 30.0][:3]
    assert len(after) == 3
    assert after[-1].bitrate_bps < 1e6, [r.bitrate_bps for r in after]
    assert max(r.bitrate_bps for r in video(s) if r.t_request < 30.0) == 4_000_000


@pytest.mark.parametrize("algo", ["grate", "throughput", "bba", "bola", "dynamic", "mpc_fast", "mpc_robust"])
def test_every_algorithm_plays_to_the_end(algo: str) -> None:
    s = simulate(algo, [(0.0, 3e6)], duration_s=40.0)
    assert s.done and s.end_reason == "ended"
    assert [r.index for r in video(s)] == list(range(10))
    assert len([r for r in s.segments if r.stream == "audio"]) == 10


def expected_stall_s(s: PlayerSession) -> float:
    """Independent check: segment i of both streams must be there by its play time."""
    arrivals: dict[int, float] = {}
    for row in s.segments:
        arrivals[row.index] = max(arrivals.get(row.index, 0.0), row.t_last_byte)
    play_start = arrivals[0]  # threshold 1 s < segment 4 s: the first segments start playback
    stall = 0.0
    for index in sorted(arrivals)[1:]:
        due = play_start + index * SEG + stall
        stall += max(0.0, arrivals[index] - due)
    return stall


def test_outage_below_lowest_level_stalls_as_the_segment_timings_say() -> None:
    s = simulate("grate", [(0.0, 2e6), (3.0, 50e3), (13.0, 2e6)], duration_s=60.0)
    total = sum(r.stall_s for r in s.segments)
    assert len(s.stalls) >= 1 and total > 1.0
    assert total == pytest.approx(expected_stall_s(s), rel=0.2)
    assert total == pytest.approx(sum(e.duration_s for e in s.stalls))


def test_stopped_while_stalled_reports_the_open_stall() -> None:
    s = session("grate", duration_s=60.0)
    with pytest.raises(AssertionError, match="did not finish"):  # the outage outlasts the 30 s limit
        run(s, SimLink(steps=[(0.0, 2e6), (3.0, 1e3)]), limit_s=30.0)
    assert s.state == "stalled" and s.stall_start is not None
    started, now = s.stall_start, s.clock_s  # the simulated link's last step went past the limit
    s.stop(now, "duration limit")
    end = s.report().stall_at_end
    assert end is not None and end.t_start == started and end.stream in ("video", "audio")
    assert end.duration_s == pytest.approx(now - started) and end.duration_s > 10.0
    assert s.report().end_reason == "duration limit"


def test_stopped_while_playing_has_no_open_stall() -> None:
    s = session("grate", duration_s=60.0)
    with pytest.raises(AssertionError, match="did not finish"):
        run(s, SimLink(steps=[(0.0, 20e6)]), limit_s=10.0)
    s.stop(s.clock_s, "duration limit")
    assert s.state == "ended" and s.report().stall_at_end is None


def test_no_stall_with_ample_bandwidth() -> None:
    s = simulate("throughput", [(0.0, 20e6)])
    assert s.stalls == [] and all(r.stall_s == 0 for r in s.segments)


# --------------------------------------------------------------- buffer model


def test_max_buffer_holds_requests_back() -> None:
    s = simulate("grate", [(0.0, 50e6)], duration_s=80.0, max_buffer_s=10.0)
    for row in s.segments:
        assert row.buffer_s <= 10.0 + SEG + 1e-6
    late = [r for r in video(s) if r.index >= 5]
    assert all(r.buffer_s > 10.0 - 1e-6 for r in late)  # refilled to just above the cap each time


def test_one_outstanding_request_per_stream() -> None:
    s = simulate("bola", [(0.0, 3e6), (20.0, 800e3)])
    for stream in ("video", "audio"):
        rows = [r for r in s.segments if r.stream == stream]
        for before, after in zip(rows, rows[1:], strict=False):
            assert after.t_request >= before.t_last_byte - 1e-9


def test_startup_waits_for_both_streams() -> None:
    s = simulate("grate", [(0.0, 1e6)], duration_s=20.0)
    first_video = video(s)[0].t_last_byte
    first_audio = next(r for r in s.segments if r.stream == "audio").t_last_byte
    assert s.startup_delay_s == pytest.approx(max(first_video, first_audio))


def test_init_segment_fetched_once_per_chosen_level() -> None:
    s = simulate("grate", [(0.0, 5e6), (30.0, 1e6)])
    levels = {(r.stream, r.level) for r in s.segments}
    assert len(s.inits) == len(levels)


def test_decision_rows_one_per_segment() -> None:
    s = simulate("throughput", [(0.0, 2e6)], duration_s=40.0)
    assert len(s.decisions) == len(s.segments)
    for d, r in zip(
        sorted(s.decisions, key=lambda d: (d.stream, d.index)),
        sorted(s.segments, key=lambda r: (r.stream, r.index)),
        strict=True,
    ):
        assert (d.stream, d.index, d.level, d.bitrate_bps) == (r.stream, r.index, r.level, r.bitrate_bps)
        assert d.algorithm == ("throughput" if d.stream == "video" else "grate")


def test_events_in_order() -> None:
    s = simulate("grate", [(0.0, 2e6), (3.0, 50e3), (13.0, 2e6)], duration_s=40.0)
    events = []
    while (event := s.next_event()) is not None:
        events.append(event)
    kinds = [type(e) for e in events]
    assert kinds[0] is LevelChosen and kinds[-1] is PlaybackEnded
    assert kinds.count(PlaybackStarted) == 1
    assert kinds.count(StallStarted) == kinds.count(StallEnded) == len(s.stalls)
    assert kinds.count(SegmentReceived) == len(s.segments)


# -------------------------------------------------------------------- errors


def test_threshold_above_max_buffer_is_rejected() -> None:
    with pytest.raises(ConfigError, match="threshold_s"):
        PlayerConfig(max_buffer_s=1.0, threshold_s=2.0)


def test_http_error_and_unknown_path_raise_run_error() -> None:
    s = session()
    action = s.next_action(0.0)
    assert isinstance(action, FetchAction)
    bad = FetchResult(
        path=action.path, status=404, bytes=0, t_request=0, t_first_byte=0.1, t_last_byte=0.1, transport="t"
    )
    with pytest.raises(RunError, match="404"):
        s.on_fetch_complete(bad, 0.1)
    with pytest.raises(RunError, match="no outstanding"):
        s.on_fetch_complete(
            FetchResult(path="nope", status=200, bytes=1, t_request=0, t_first_byte=0, t_last_byte=0, transport="t"),
            0.2,
        )


def test_clock_must_not_go_backwards() -> None:
    s = session()
    s.next_action(5.0)
    with pytest.raises(RunError, match="backwards"):
        s.next_action(1.0)


def test_waits_for_fetches_when_both_streams_are_busy() -> None:
    s = session()
    actions = [s.next_action(0.0) for _ in range(3)]
    assert [type(a) for a in actions] == [FetchAction, FetchAction, WaitAction]
    assert {a.stream for a in actions[:2]} == {"video", "audio"}  # init segments first
    assert actions[2].until is None


# ------------------------------------------------------------- asyncio driver


def tiny_mpd() -> bytes:
    ladder = media.parse_ladder(
        {
            "name": "tiny",
            "segment_duration_s": 0.1,
            "duration_s": 0.3,
            "video": {"codecs": "avc1", "levels": [{"bitrate_bps": 100_000}, {"bitrate_bps": 400_000}]},
            "audio": {"codecs": "mp4a.40.2", "levels": [{"bitrate_bps": 64_000}]},
        }
    )
    params = media.MediaParams(ladder=ladder, duration_s=0.3, vbr=0.0, seed=0)
    return ET.tostring(media.build_mpd(params))


@dataclass(frozen=True, kw_only=True)
class BodyResult(FetchResult):
    body: bytes = b""


class FakeFetcher(Fetcher):
    """Answers after ``delay_s`` of real time; 1 Mbit/s worth of bytes per segment."""

    def __init__(self, mpd: bytes, delay_s: float = 0.01) -> None:
        self.mpd, self.delay_s, self.requests = mpd, delay_s, []
        self.t_first_mpd = float("inf")

    async def fetch(self, stream: str, path: str) -> FetchResult:
        self.requests.append((stream, path))
        t0 = time.monotonic()
        if path.endswith(".mpd"):
            self.t_first_mpd = min(self.t_first_mpd, t0)
        await asyncio.sleep(self.delay_s)
        t1 = time.monotonic()
        body = self.mpd if stream == "mpd" else b""
        return BodyResult(
            path=path,
            status=200,
            bytes=len(body) or 12_500,
            t_request=t0,
            t_first_byte=t0 + 0.001,
            t_last_byte=t1,
            transport="fake",
            body=body,
        )

    async def close(self) -> None:
        pass


def test_play_drives_the_session_in_real_time() -> None:
    fetcher = FakeFetcher(tiny_mpd())
    report = asyncio.run(play("/content/manifest.mpd", fetcher, abr="throughput", threshold_s=0.1, max_buffer_s=1.0))
    assert report.end_reason == "ended"
    assert [r.index for r in report.segments if r.stream == "video"] == [0, 1, 2]
    assert fetcher.requests[0] == ("mpd", "/content/manifest.mpd")
    assert all(p.startswith("/content/") for _, p in fetcher.requests)
    assert report.mpd is not None and report.startup_delay_s is not None


def test_play_fetches_the_prelude_first_in_order_on_the_mpds_stream() -> None:
    fetcher = FakeFetcher(tiny_mpd())
    report = asyncio.run(play("/c/manifest.mpd", fetcher, threshold_s=0.1, max_buffer_s=1.0,
                              prelude=("/c/nest_dashjs.html", "/c/dash.all.min.js")))
    assert fetcher.requests[:3] == [("mpd", "/c/nest_dashjs.html"), ("mpd", "/c/dash.all.min.js"),
                                    ("mpd", "/c/manifest.mpd")]
    assert report.end_reason == "ended" and report.mpd is not None
    assert report.startup_delay_s is not None and report.mpd.t_request >= fetcher.t_first_mpd  # counted from the MPD


def test_the_duration_limit_counts_from_the_prelude() -> None:
    # racing_chromium behind DVL: the page and script took 50 s, and the session ran 50 s past the run
    fetcher = FakeFetcher(tiny_mpd(), delay_s=0.05)
    t0 = time.monotonic()
    report = asyncio.run(play("/m.mpd", fetcher, threshold_s=0.1, max_buffer_s=1.0, max_duration_s=0.25,
                              prelude=("/page.html", "/script.js")))
    assert report.end_reason == "duration limit" and report.ended_at is not None
    assert report.ended_at - t0 <= 0.25 + 0.06  # not 0.1 s (the prelude) later


def test_play_stops_at_the_duration_limit() -> None:
    fetcher = FakeFetcher(tiny_mpd(), delay_s=0.05)
    report = asyncio.run(play("/m.mpd", fetcher, threshold_s=0.1, max_buffer_s=1.0, max_duration_s=0.12))
    assert report.end_reason == "duration limit"


def test_cancelling_play_ends_the_session_and_keeps_what_was_played() -> None:
    """The client cancels the play task on SIGTERM (the runner's deadline): the report survives."""

    async def main() -> PlayerReport:
        task = asyncio.create_task(play("/m.mpd", FakeFetcher(tiny_mpd(), delay_s=0.1), threshold_s=0.1,
                                        max_buffer_s=1.0))
        await asyncio.sleep(0.35)
        task.cancel()
        return await task

    report = asyncio.run(main())
    assert report.end_reason == "terminated"
    assert 1 <= len([r for r in report.segments if r.stream == "video"]) < 3


def test_play_needs_an_mpd_body() -> None:
    class NoBody(FakeFetcher):
        async def fetch(self, stream: str, path: str) -> FetchResult:
            return FetchResult(
                path=path, status=200, bytes=1, t_request=0, t_first_byte=0, t_last_byte=0, transport="x"
            )

    with pytest.raises(RunError, match="MPD body"):
        asyncio.run(play("/m.mpd", NoBody(b"")))
    report = asyncio.run(play("/m.mpd", FakeFetcher(b""), mpd_text=tiny_mpd(), threshold_s=0.1, max_buffer_s=1.0))
    assert report.end_reason == "ended"
