"""dash.js's behaviours in our player: its AbandonRequestsRule and XHR timeout (dash.abandon), the session's
re-request and the driver's cancel, its initial bitrate, its audio buffer target."""

from __future__ import annotations

import asyncio
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
from dash_simlink import manifest_for
from mp4_boxes import init_segment, media_segment

from nest_experiments.dash.content import media
from nest_experiments.dash.core.abandon import (
    ABANDON_LOAD_S,
    DASHJS_INITIAL_BPS,
    AbandonRule,
    Progress,
    Trace,
    optimal_level,
)
from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.fetch import ABANDONED, TRANSFER_WATCH, Fetcher, FetchResult
from nest_experiments.dash.core.player import (
    SCHEDULE_GAP_S,
    FetchAction,
    PlayerConfig,
    PlayerSession,
    RequestAbandoned,
    WaitAction,
    play,
)
from nest_experiments.dash.core.records import ABANDON, abandoned

LADDER = (300_000, 750_000, 1_200_000, 2_400_000)
SEG = 4.0
RULE = AbandonRule()


def slow(total: int, *, kbit: float, events: int, latency_s: float = 0.2, step_s: float = 0.1) -> Progress:
    """A request whose first progress event came ``latency_s`` after it was sent, then one per ``step_s`` at
    ``kbit``."""
    p = Progress(t_request=0.0)
    t, loaded = latency_s, 1000
    p.observe(t, loaded, total)
    for _ in range(events - 1):
        t += step_s
        loaded += round(kbit * 1000 / 8 * step_s)
        p.observe(t, loaded, total)
    return p


def decide(p: Progress, *, now: float | None = None, level: int = 3, buffer_s: float = 2.0) -> object:
    last = p.t_first_byte + sum(t.d_s for t in p.traces[1:]) if p.t_first_byte is not None else 0.0
    return RULE.decide(p, now=last if now is None else now, buffer_s=buffer_s, stable_buffer_s=10.0, level=level,
                       bitrates_bps=LADDER, segment_duration_s=SEG)


TOP = LADDER[3] * SEG // 8  # 1.2 MB: a 4 s segment at 2400 kbit/s


# ---------------------------------------------------------------- progress events


def test_progress_events_come_at_most_every_50_ms_and_only_with_new_bytes() -> None:
    p = Progress(t_request=1.0)
    assert p.observe(1.3, 500, 9000) and p.t_first_byte == 1.3
    assert not p.observe(1.32, 900, 9000)  # 20 ms after the last event: throttled (the bytes wait for the next)
    assert not p.observe(1.4, 500, 9000)  # nothing new
    assert p.observe(1.4, 1500, 9000)
    assert p.traces == [Trace(d_s=pytest.approx(0.3), nbytes=500), Trace(d_s=pytest.approx(0.1), nbytes=1000)]
    assert (p.loaded, p.total) == (1500, 9000)


# ---------------------------------------------------------------- the rule (AbandonRequestsRule.js)


def test_a_top_level_segment_at_500_kbit_is_abandoned_for_the_highest_level_it_affords() -> None:
    verdict = decide(slow(TOP, kbit=500, events=8))
    # 1.2 MB at 500 kbit/s: 19.2 s > 1.8 x 4 s; the highest level <= 500 kbit/s is 300 kbit/s
    assert verdict is not None and verdict.level == 0 and verdict.throughput_bps == pytest.approx(500_000, rel=0.01)
    verdict = decide(slow(TOP, kbit=1000, events=8))  # 9.6 s > 7.2 s: 750 kbit/s affordable
    assert verdict is not None and verdict.level == 1


def test_the_first_progress_event_holds_the_latency_and_is_left_out() -> None:
    # 3 s to the first byte would make any average of all events tiny; without it the rate is 4000 kbit/s
    assert decide(slow(TOP, kbit=4000, events=8, latency_s=3.0)) is None


@pytest.mark.parametrize(("why", "kw", "progress"), [
    ("fewer than 6 progress events", {}, lambda: slow(TOP, kbit=500, events=5, step_s=0.2)),
    ("within 500 ms of the first byte", {}, lambda: slow(TOP, kbit=500, events=8, step_s=0.05)),
    ("fast enough: 1.2 MB at 2000 kbit/s is 4.8 s < 7.2 s", {}, lambda: slow(TOP, kbit=2000, events=8)),
    ("already at the lowest level", {"level": 0}, lambda: slow(LADDER[0] * 40 // 8, kbit=50, events=8)),
    ("buffer above the stable buffer time", {"buffer_s": 10.5}, lambda: slow(TOP, kbit=500, events=8)),
    ("content-length unknown", {}, lambda: slow(0, kbit=500, events=8)),
])
def test_requests_the_rule_keeps(why: str, kw: dict, progress: object) -> None:
    assert decide(progress(), **kw) is None, why  # type: ignore[operator]


def test_not_abandoned_when_less_remains_than_the_whole_segment_at_the_target() -> None:
    # 1.2 MB segment, 1.15 MB loaded at ~300 kbit/s: 50 KB to go < 150 KB (the 300 kbit/s segment)
    p = slow(TOP, kbit=300, events=8)
    p.loaded = TOP - 50_000
    assert decide(p) is None
    p.loaded = TOP - 200_000
    assert decide(p) is not None


def test_no_bytes_after_the_first_event_abandons_for_the_lowest_level() -> None:
    p = Progress(t_request=0.0)
    p.observe(0.1, 1000, TOP)
    for i in range(6):  # events with 0 new bytes are not events (XHR fires none): simulate a trickle of 1 byte
        p.observe(0.2 + 0.2 * i, 1001 + i, TOP)
    verdict = decide(p, now=1.5)
    assert verdict is not None and verdict.level == 0


def test_optimal_level_is_dashjs_getOptimalRepresentationForBitrate() -> None:
    assert [optimal_level(LADDER, k) for k in (0, 100, 300, 749, 750, 5000)] == [0, 0, 0, 0, 1, 3]


# ---------------------------------------------------------------- the session


def session(level: int = 3) -> PlayerSession:
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)
    return PlayerSession(manifest, abr_video=create_abr("fixed", level=level), abr_audio=create_abr("grate"),
                         start_time=0.0, config=PlayerConfig(abandon=AbandonRule()))


def media_action(s: PlayerSession, stream: str = "video") -> FetchAction:
    """Complete init requests until ``stream``'s next request is a media segment; return it."""
    while True:
        a = s.streams[stream].outstanding or s.next_action(s.clock_s)
        if isinstance(a, WaitAction) and a.until is not None and a.until <= s.clock_s + SCHEDULE_GAP_S + 1e-9:
            a = s.next_action(a.until)  # schedule "dashjs": the other stream's timer callback, just after
        assert isinstance(a, FetchAction)
        if a.stream == stream and a.kind == "media":
            return a
        s.on_fetch_complete(FetchResult(path=a.path, status=200, bytes=100, t_request=s.clock_s,
                                        t_first_byte=s.clock_s, t_last_byte=s.clock_s, transport="x"), s.clock_s)


def test_an_abandoned_segment_is_asked_again_at_the_rules_level_which_then_holds() -> None:
    s = session(level=7)  # abr_quic_tcp's top level: 4000 kbit/s, 4 s segments (2 MB)
    first = media_action(s)
    assert (first.index, first.level) == (0, 7)
    total = s.manifest.adaptation_set("video").representations[7].bandwidth * 4 // 8
    progress = slow(total, kbit=500, events=8)  # 32 s for the segment: the highest level <= 500 kbit/s is 400
    assert s.check_abandon("video", progress, 1.0)
    again = media_action(s)  # the init segment of level 1 first, then the same index
    assert (again.index, again.level) == (0, 1)
    assert not s.check_abandon("video", slow(total, kbit=100, events=8), 2.0)  # one abandonment per index
    event = [e for e in iter(s.next_event, None) if isinstance(e, RequestAbandoned)]
    assert len(event) == 1 and (event[0].level, event[0].to_level, event[0].total) == (7, 1, total)
    assert [d.algorithm for d in s.decisions if d.stream == "video"] == ["fixed", ABANDON]
    assert abandoned(s.decisions) == 1
    # the next segment: "fixed" asks for level 7, the ThroughputRule's no-switch keeps 1 for 10 s
    s.on_fetch_complete(FetchResult(path=again.path, status=200, bytes=100, t_request=2.0, t_first_byte=2.0,
                                    t_last_byte=2.5, transport="x"), 2.5)
    assert media_action(s).level == 1
    s.streams["video"].outstanding = None
    s.streams["video"].chosen = None
    s.advance(2.5 + ABANDON_LOAD_S)
    assert media_action(s).level == 7


def test_a_request_open_for_20_s_is_asked_again_a_second_later_at_most_3_times() -> None:
    s = session(level=0)  # the lowest level: the rule never fires; the XHR timeout still does
    first = media_action(s)
    assert first.level == 0
    quiet = Progress(t_request=0.0)
    for attempt in range(1, 4):
        sent = s.clock_s
        assert not s.check_abandon("video", quiet, sent + 19.9, sent=sent)
        assert s.check_abandon("video", quiet, sent + 20.0, sent=sent)
        assert s.next_wakeup() == pytest.approx(sent + 21.0)  # nothing asked before the retry interval
        assert s.streams["video"].outstanding is None and not s._may_request(s.streams["video"])
        again = media_action_at(s, sent + 21.0)
        assert (again.path, again.index) == (first.path, first.index), attempt
    sent = s.clock_s
    assert not s.check_abandon("video", quiet, sent + 60.0, sent=sent)  # dash.js's 3 retries are spent
    timeouts = [e for e in iter(s.next_event, None) if isinstance(e, RequestAbandoned)]
    assert [(e.reason, e.level, e.to_level) for e in timeouts] == [("timeout", 0, 0)] * 3
    assert [d.algorithm for d in s.decisions if d.stream == "video"] == ["fixed", "timeout", "timeout", "timeout"]
    assert abandoned(s.decisions) == 0  # qoe.json's "abandoned" counts the rule's only


def media_action_at(s: PlayerSession, now: float) -> FetchAction:
    s.advance(now)
    return media_action(s)


def test_start_dashjs_puts_each_streams_first_segment_at_the_level_of_dashjs_initial_bitrate() -> None:
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)  # video 200..4000 kbit/s, audio 64 and 128 kbit/s
    s = PlayerSession(manifest, abr_video=create_abr("throughput"), abr_audio=create_abr("throughput"),
                      start_time=0.0, config=PlayerConfig(initial_bps=DASHJS_INITIAL_BPS))
    video, audio = media_action(s, "video"), media_action(s, "audio")
    assert (video.level, audio.level) == (4, 0)  # 1000 kbit/s -> 1000; 100 kbit/s -> 64 (the highest at most)
    plain = PlayerSession(manifest, abr_video=create_abr("throughput"), abr_audio=create_abr("throughput"),
                          start_time=0.0)
    assert media_action(plain, "video").level == 0  # our throughput rule without a sample: the lowest


def complete(s: PlayerSession, a: FetchAction, now: float) -> None:
    s.on_fetch_complete(FetchResult(path=a.path, status=200, bytes=100, t_request=now, t_first_byte=now,
                                    t_last_byte=now, transport="x"), now)


def test_schedule_dashjs_keeps_audio_at_most_a_second_ahead_of_video() -> None:
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)  # 4 s segments
    s = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                      start_time=0.0, config=PlayerConfig(max_buffer_s=30.0, schedule="dashjs"))
    video = media_action(s, "video")  # video's segment 0 stays out: its buffer is 0
    complete(s, media_action(s, "audio"), 0.5)  # audio 4 s: its target is max(0 + 1, 4) = 4 s
    assert s.buffer_s("audio") == pytest.approx(4.0) and s.next_action(0.5).__class__.__name__ == "WaitAction"
    # dash.js's schedule timer: audio checks again every 500 ms from its own segment's arrival
    assert s.next_wakeup() == pytest.approx(1.0)
    assert isinstance(s.next_action(1.0), WaitAction) and s.next_wakeup() == pytest.approx(1.5)
    complete(s, video, 1.2)  # video 4 s (playback starts): audio may be 5 s ahead of the start now
    asked = s.next_action(1.2)  # video checks as its segment arrives; audio not before its timer fires, at 1.5
    assert isinstance(asked, FetchAction) and (asked.stream, asked.index) == ("video", 1)
    assert isinstance(s.next_action(1.2), WaitAction) and s.next_wakeup() == pytest.approx(1.5)
    audio = s.next_action(1.5)
    assert isinstance(audio, FetchAction) and (audio.stream, audio.index) == ("audio", 1)
    plain = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                          start_time=0.0, config=PlayerConfig(max_buffer_s=30.0))
    media_action(plain, "video")
    complete(plain, media_action(plain, "audio"), 0.5)
    again = plain.next_action(0.5)  # every stream to max_buffer: audio runs on alone
    assert isinstance(again, FetchAction) and (again.stream, again.index) == ("audio", 1)


def test_schedule_dashjs_asks_two_streams_whose_timers_fire_together_one_callback_apart() -> None:
    # dash.js checks each stream in its own timer callback: at the start both streams are due, video asks, audio
    # asks SCHEDULE_GAP_S later (Chromium 156: 0.35-3.44 ms at the origin), never in the same instant; "buffer" asks
    # both at once. Later, a stream due within the gap of another's request waits for it too
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)
    s = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                      start_time=0.0, config=PlayerConfig(max_buffer_s=30.0, schedule="dashjs"))
    video = s.next_action(0.0)
    assert isinstance(video, FetchAction) and (video.stream, video.kind) == ("video", "init")
    wait = s.next_action(0.0)
    assert isinstance(wait, WaitAction) and wait.until == pytest.approx(SCHEDULE_GAP_S) and 0 < SCHEDULE_GAP_S < 0.005
    audio = s.next_action(SCHEDULE_GAP_S)
    assert isinstance(audio, FetchAction) and (audio.stream, audio.kind) == ("audio", "init")
    complete(s, video, 0.1)
    complete(s, audio, 0.1 + SCHEDULE_GAP_S / 2)  # both due again within one callback of each other
    first = s.next_action(0.1 + SCHEDULE_GAP_S / 2)
    assert isinstance(first, FetchAction) and first.stream == "video"
    assert isinstance(s.next_action(0.1 + SCHEDULE_GAP_S / 2), WaitAction)
    later = s.next_action(0.1 + SCHEDULE_GAP_S * 1.5)
    assert isinstance(later, FetchAction) and later.stream == "audio"
    plain = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                          start_time=0.0, config=PlayerConfig(max_buffer_s=30.0))
    assert [plain.next_action(0.0).stream, plain.next_action(0.0).stream] == ["video", "audio"]  # type: ignore[union-attr]


def test_schedule_dashjs_asks_video_only_while_a_segment_fits_below_the_buffer_target() -> None:
    # dash.js's _shouldBuffer: bufferLevel + segmentDuration < bufferTarget (30 s, 4 s segments): video stops at 28 s
    # of buffer (24 + 4 < 30 asks, 28 + 4 does not), where our "buffer" schedule asks up to 32 s (28 < 30)
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)
    for schedule, stops_at in (("dashjs", 28.0), ("buffer", 32.0)):
        s = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                          start_time=0.0, config=PlayerConfig(max_buffer_s=30.0, threshold_s=30.0, schedule=schedule))
        while isinstance(action := s.next_action(0.0), FetchAction):
            complete(s, action, 0.0)
        assert s.buffer_s("video") == pytest.approx(stops_at), schedule


def test_audio_counts_what_its_segment_presents_so_a_short_aac_segment_asks_the_next_at_once() -> None:
    # dash.js measures audio in the SourceBuffer: ffmpeg's first "4 s" AAC segment at 48 kHz presents 3.989 s (188
    # frames, less the priming frame the edit list drops), below the 4 s target, so audio 1 goes out beside video 0
    # (Chromium's sessions, docs/racing_chromium_mechanism.md §9.3); counting the MPD's 4.0 s, audio waits
    manifest = manifest_for("abr_quic_tcp", duration_s=80.0)
    init, first = init_segment(timescale=48000, media_time=1024), media_segment(decode_time=0, durations=[1024] * 188)
    for heads, asks_at_once in (((init, first), True), ((b"", b""), False)):
        s = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                          start_time=0.0, config=PlayerConfig(max_buffer_s=30.0, schedule="dashjs"))
        media_action(s, "video")
        a = s.next_action(SCHEDULE_GAP_S)
        assert isinstance(a, FetchAction) and (a.stream, a.kind) == ("audio", "init")
        s.on_fetch_complete(FetchResult(path=a.path, status=200, bytes=len(heads[0]), t_request=0.0, t_first_byte=0.0,
                                        t_last_byte=0.1, transport="x", head=heads[0]), 0.1)
        audio = media_action(s, "audio")
        s.on_fetch_complete(FetchResult(path=audio.path, status=200, bytes=30_000, t_request=0.1, t_first_byte=0.2,
                                        t_last_byte=0.5, transport="x", head=heads[1]), 0.5)
        assert s.buffer_s("audio") == pytest.approx(187 * 1024 / 48000 if asks_at_once else 4.0)
        again = s.next_action(0.5)
        assert isinstance(again, FetchAction) == asks_at_once
        if asks_at_once:
            assert (again.stream, again.index) == ("audio", 1)


def test_the_last_segment_buffers_a_stream_to_the_end_of_the_presentation() -> None:
    # media that present a little less than the MPD's duration (AAC frames) must not stall before the end
    manifest = manifest_for("abr_quic_tcp", duration_s=8.0)  # 2 segments of 4 s
    s = PlayerSession(manifest, abr_video=create_abr("fixed", level=0), abr_audio=create_abr("fixed", level=0),
                      start_time=0.0)
    init = init_segment(timescale=48000, media_time=1024)
    a = s.next_action(0.0)
    while isinstance(a, FetchAction):
        if a.kind == "init":
            head = init if a.stream == "audio" else b""
        else:  # audio: 4 s less one frame per segment
            head = media_segment(decode_time=(a.index or 0) * 187 * 1024 + 1024, durations=[1024] * 187) \
                if a.stream == "audio" else b""
        s.on_fetch_complete(FetchResult(path=a.path, status=200, bytes=1000, t_request=0.0, t_first_byte=0.0,
                                        t_last_byte=0.0, transport="x", head=head), 0.0)
        a = s.next_action(0.0)
    assert s.buffer_s("audio") == pytest.approx(8.0) and s.buffer_s("video") == pytest.approx(8.0)
    s.advance(9.0)
    assert s.state == "ended" and not s.stalls


def test_without_the_rule_nothing_is_abandoned() -> None:
    s = PlayerSession(manifest_for("abr_quic_tcp", duration_s=80.0), abr_video=create_abr("fixed", level=3),
                      abr_audio=create_abr("grate"), start_time=0.0)
    media_action(s)
    assert not s.check_abandon("video", slow(10**6, kbit=100, events=10), 2.0)


# ---------------------------------------------------------------- the driver: a real cancel of a watched transfer


def tiny_mpd() -> bytes:
    ladder = media.parse_ladder({
        "name": "tiny", "segment_duration_s": 0.1, "duration_s": 0.3,
        "video": {"codecs": "avc1", "levels": [{"bitrate_bps": 100_000}, {"bitrate_bps": 400_000}]},
        "audio": {"codecs": "mp4a.40.2", "levels": [{"bitrate_bps": 64_000}]}})
    return ET.tostring(media.build_mpd(media.MediaParams(ladder=ladder, duration_s=0.3, vbr=0.0, seed=0)))


@dataclass
class _Transfer:
    path: str
    t_request: float
    nbytes: int = 0
    length: int = 0


@dataclass(frozen=True, kw_only=True)
class _Result(FetchResult):
    body: bytes = b""


class TrickleFetcher(Fetcher):
    """Level 1 (400 kbit/s) video segments trickle at 4 kB/s; everything else arrives at once. Counts
    transfers through TRANSFER_WATCH as a transport does, and records how each cancel came."""

    def __init__(self) -> None:
        self.cancels: list[tuple[str, str]] = []
        self.requests: list[str] = []

    async def fetch(self, stream: str, path: str) -> FetchResult:
        self.requests.append(path)
        t0 = time.monotonic()
        body = tiny_mpd() if stream == "mpd" else b""
        size = len(body) or 5000
        transfer = _Transfer(path, t0)
        if (watch := TRANSFER_WATCH.get()) is not None:
            watch(transfer)
        name = path.rsplit("/", 1)[-1]  # v1_3.m4s: video level 1, segment 3; v1_init.mp4
        if name.startswith("v1_") and "init" not in name:
            transfer.length = size
            try:
                while transfer.nbytes < size:
                    await asyncio.sleep(0.02)
                    transfer.nbytes += 80  # 4 kB/s
            except asyncio.CancelledError as exc:
                self.cancels.append((path, exc.args[0] if exc.args else ""))
                raise
        return _Result(path=path, status=200, bytes=size, t_request=t0, t_first_byte=t0, t_last_byte=time.monotonic(),
                       transport="fake", body=body)

    async def close(self) -> None:
        pass


def test_the_driver_cancels_an_abandoned_request_and_fetches_the_segment_at_the_lower_level() -> None:
    fetcher = TrickleFetcher()
    report = asyncio.run(play("/m.mpd", fetcher, abr="fixed", fixed_level=1, threshold_s=0.1, max_buffer_s=1.0,
                              abandon=AbandonRule(), max_duration_s=20.0))
    assert report.end_reason == "ended"
    # segment 0 at level 1: 5 kB at 4 kB/s would take 1.25 s > 1.8 x 0.1 s; after 6 progress events and 0.5 s it is
    # abandoned (32 kbit/s: the lowest level) with the driver's ABANDONED message; the hold keeps level 0 for 10 s
    assert fetcher.cancels and all(why == ABANDONED for _, why in fetcher.cancels)
    assert len(fetcher.cancels) == 1
    video = [r for r in report.segments if r.stream == "video"]
    assert [(r.index, r.level) for r in video] == [(0, 0), (1, 0), (2, 0)]
    assert [d.algorithm for d in report.decisions if d.stream == "video"][:2] == ["fixed", ABANDON]


class Scripted(AbrAlgorithm):
    """Levels from a list, one per decision (the last one repeats)."""

    name = "scripted"

    def __init__(self, *levels: int) -> None:
        self.levels = list(levels)

    def choose(self, state: PlayerState) -> Decision:
        return Decision(level=self.levels.pop(0) if len(self.levels) > 1 else self.levels[0])


def racing_session(*levels: int, fast_switch: bool = True) -> PlayerSession:
    manifest = manifest_for("youtube_racing", duration_s=60.0)  # 5 s segments, video 70..1300 kbit/s
    return PlayerSession(manifest, abr_video=Scripted(*levels), abr_audio=create_abr("fixed", level=0),
                         start_time=0.0, config=PlayerConfig(max_buffer_s=30.0, fast_switch=fast_switch,
                                                             schedule="dashjs"))


def play_first(s: PlayerSession, t: float) -> None:
    """Video's segment 0 and audio's arrive; playback starts at ``t``."""
    video = media_action(s, "video")
    complete(s, media_action(s, "audio"), s.clock_s)  # audio asked SCHEDULE_GAP_S after video
    complete(s, video, t)


def test_fast_switch_dashjs_replaces_the_segment_under_the_playhead_and_the_buffered_ones_after_it() -> None:
    # dash.js 5.2.1 in Chromium on the clean link: segment 0 at level 3, the throughput rule's level 4 at the
    # playhead's start, segment 0 again at 4 (docs/racing_chromium_mechanism.md §9.5)
    s = racing_session(3, 4, 4, 4)
    play_first(s, 1.0)
    again = media_action(s, "video")
    assert (again.index, again.level) == (0, 4)
    complete(s, again, 3.0)  # 2 s later: the playhead at 2 s, the buffer still ends at 5 s
    assert s.buffer_s("video") == pytest.approx(3.0) and s.streams["video"].history[-1].replacement
    assert (media_action(s, "video").index, [r.index for r in s.segments if r.stream == "video"]) == (1, [0, 0])
    plain = racing_session(3, 4, fast_switch=False)
    play_first(plain, 1.0)
    nxt = media_action(plain, "video")
    assert (nxt.index, nxt.level) == (1, 4)


def test_fast_switch_walks_through_every_buffered_segment_and_only_then_grows_the_buffer() -> None:
    s = racing_session(1, 1, 1, 3, 3, 3, 3)
    play_first(s, 0.1)
    for t in (0.2, 0.3):  # segments 1-2 at level 1 as well: 15 s buffered, the playhead near 0
        complete(s, media_action(s, "video"), t)
    s.advance(6.3)  # the playhead in segment 1 (6.2 s played)
    asked = []
    for t in (6.4, 6.5, 6.6):
        a = media_action(s, "video")
        asked.append((a.index, a.level))
        complete(s, a, t)
    assert asked == [(1, 3), (2, 3), (3, 3)]  # 1 and 2 replaced, 3 new
    assert s.streams["video"].buffered_end_s == pytest.approx(20.0)  # only segment 3 grew it
    down = racing_session(3, 3, 1)  # a lower level: the segment under the playhead is better, nothing replaced
    play_first(down, 0.1)
    complete(down, media_action(down, "video"), 0.2)
    nxt = media_action(down, "video")
    assert (nxt.index, nxt.level) == (2, 1)


def test_an_abr_delay_holds_the_request_back_until_its_time() -> None:
    class Waits(Scripted):
        def choose(self, state: PlayerState) -> Decision:
            return Decision(level=0, delay_s=2.5 if state.next_index == 1 else 0.0)

    s = racing_session(0)
    s.streams["video"].abr = Waits(0)
    play_first(s, 1.0)
    complete(s, media_action(s, "audio"), 1.0)  # audio's second segment (its target: video's 5 s + 1 s)
    woken, action = [1.0], s.next_action(1.0)
    while isinstance(action, WaitAction) and len(woken) < 10:
        woken.append(s.next_wakeup())  # audio's schedule timer every 0.5 s; video's delay ends at 3.5
        action = s.next_action(woken[-1])
    assert woken == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    assert isinstance(action, FetchAction) and (action.stream, action.index) == ("video", 1)
