"""The learned ABR's chunk-level simulator against the real player, its invariants, and a short training run."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from dash_simlink import INIT_BYTES, SimLink, run

from nest_experiments.config import traces
from nest_experiments.dash.content import media
from nest_experiments.dash.content.mpd import Manifest, parse_mpd
from nest_experiments.dash.core import qoe
from nest_experiments.dash.core.abr import pensieve_policy as learned
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.player import PlayerConfig, PlayerSession
from nest_experiments.dash.core.records import SegmentRow
from nest_experiments.training import sim, train

CLIP_S = 80.0
RTT_S = 0.02
# the simulator with the test link's model: no header overhead, no audio, its init size and RTT
EXACT = sim.SimConfig(clip_s=CLIP_S, rtt_s=RTT_S, payload_fraction=1.0, audio_bps=0.0, init_bytes=INIT_BYTES,
                      horizon_s=900.0)
# traces without outages (the test link cannot run at 0 bit/s)
TRACES = (("fcc", 3), ("fcc", 9), ("h2eval", 1), ("dl", 1))


def video_only(duration_s: float) -> Manifest:
    """The MPD of the abr_quic_tcp ladder without its audio AdaptationSet."""
    root = media.build_mpd(media.MediaParams(ladder=media.load_ladder("abr_quic_tcp"), duration_s=duration_s,
                                             vbr=0.0, seed=0))
    period = root.find("Period")
    assert period is not None
    for aset in [a for a in period if a.get("contentType") == "audio"]:
        period.remove(aset)
    return parse_mpd(ET.tostring(root))


def real_player(algo: str, trace: traces.Trace) -> PlayerSession:
    session = PlayerSession(video_only(CLIP_S), abr_video=create_abr(algo), abr_audio=create_abr("grate"),
                            start_time=0.0, config=PlayerConfig(max_buffer_s=EXACT.max_buffer_s))
    run(session, SimLink(steps=list(trace.steps(1.0, EXACT.horizon_s)), rtt_s=RTT_S))
    return session


def simulated(policy: sim.SimPolicy, spec: tuple[tuple[str, int], ...], config: sim.SimConfig = EXACT) -> sim.Record:
    pool = sim.trace_pool(sim.generated(spec), config)
    return sim.simulate(pool.sessions(np.arange(len(spec)), np.zeros(len(spec))), policy,
                        video=sim.video_of(config), config=config)


# ------------------------------------------------------- simulator vs player


@pytest.mark.parametrize("algo", ["bba", "bola", "mpc_fast"])
def test_simulator_plays_like_the_player_session_on_the_same_link(algo: str) -> None:
    rec = simulated(sim.RegistryPolicy(name=algo, max_buffer_s=EXACT.max_buffer_s), TRACES)
    stalled = 0
    for k, (name, seed) in enumerate(TRACES):
        rows = real_player(algo, traces.generate(name, seed=seed)).segments
        assert [r.level for r in rows] == rec.levels[k].tolist()
        assert [r.t_last_byte for r in rows] == pytest.approx(rec.t_last_byte[k].tolist(), abs=1e-6)
        assert [r.stall_s for r in rows] == pytest.approx(rec.stall_s[k].tolist(), abs=1e-6)
        assert [r.buffer_s for r in rows] == pytest.approx(rec.buffer_s[k].tolist(), abs=1e-6)
        # QoE: the real player's formula on the real player's rows = the sum of the simulator's rewards
        assert qoe.stream_summary(rows).qoe == pytest.approx(rec.qoe[k], abs=1e-6)
        stalled += sum(r.stall_s for r in rows) > 0
    assert algo != "bba" or stalled, "the comparison should include a session that stalls"


def test_rewards_add_up_to_eq1() -> None:
    rec = simulated(sim.RandomPolicy(levels=8, rng=np.random.default_rng(3)), (("hsdpa", 2), ("dvl", 1), ("fcc", 4)),
                    sim.SimConfig(clip_s=CLIP_S))
    for k in range(3):
        assert rec.qoe[k] == pytest.approx(qoe.qoe_eq1(rec.bitrates_bps[rec.levels[k]].tolist(), rec.rebuffer_s[k]))


# ---------------------------------------------------------------- invariants


class Watch:
    """A random policy that keeps the buffer it saw at every decision."""

    def __init__(self) -> None:
        self.inner = sim.RandomPolicy(levels=8, rng=np.random.default_rng(7))
        self.buffers: list[np.ndarray] = []

    def reset(self, batch: int) -> None:
        self.buffers = []

    def decide(self, step: sim.Step) -> np.ndarray:
        self.buffers.append(step.buffer_s)
        return self.inner.decide(step)


def test_invariants_buffer_never_negative_and_each_stall_counted_once() -> None:
    config = sim.SimConfig(clip_s=120.0, horizon_s=3000.0)
    spec = tuple(("hsdpa", s) for s in range(1, 9)) + (("dvl", 1), ("dl", 1))
    watch = Watch()
    rec = simulated(watch, spec, config)
    assert not rec.truncated.any()
    assert np.min(watch.buffers) >= 0 and rec.buffer_s.min() >= 0
    assert (rec.buffer_s <= config.max_buffer_s + rec.durations_s.max() + 1e-6).all()
    assert (rec.rebuffer_s > 0).sum() >= 3  # outages and DVL's 64 kbit/s stall
    # playback ends (startup + media + every stall) exactly when the last segment's buffer has played out
    end = rec.t_last_byte[:, -1] + rec.buffer_s[:, -1]
    assert end == pytest.approx(rec.startup_delay_s + config.clip_s + rec.rebuffer_s, abs=1e-6)
    assert (rec.stall_s[:, 0] == 0).all()  # the start-up wait is not a stall


def test_stalls_match_those_the_arrival_times_imply() -> None:
    rec = simulated(sim.RandomPolicy(levels=8, rng=np.random.default_rng(5)), (("hsdpa", 3), ("hsdpa", 6)),
                    sim.SimConfig(clip_s=CLIP_S))
    for k in range(2):
        rows = [_row(rec, k, n) for n in range(rec.levels.shape[1])]
        implied = qoe.implied_stalls(rows, segment_s=4.0, threshold_s=1.0)
        assert sum(e - s for s, e in implied) == pytest.approx(rec.rebuffer_s[k], abs=1e-6)


def _row(rec: sim.Record, k: int, n: int) -> SegmentRow:
    return SegmentRow(stream="video", index=n, level=int(rec.levels[k, n]),
                          bitrate_bps=int(rec.bitrates_bps[rec.levels[k, n]]), bytes=int(rec.sizes_bytes[k, n]),
                          t_request=float(rec.t_request[k, n]), t_first_byte=float(rec.t_first_byte[k, n]),
                          t_last_byte=float(rec.t_last_byte[k, n]), buffer_s=float(rec.buffer_s[k, n]),
                          stall_s=float(rec.stall_s[k, n]), transport="sim")


def test_finish_times_integrates_the_trace_and_waits_out_an_outage() -> None:
    cum = np.array([[0.0, 1e6, 1e6, 3e6, 4e6]])  # 1 Mbit/s, an outage, 2 Mbit/s, 1 Mbit/s
    t = sim.finish_times(np.repeat(cum, 3, axis=0), np.array([0.5, 0.5, 0.0]), np.array([0.25e6, 1e6, 5e6]), 1.0)
    assert t[:2] == pytest.approx([0.75, 2.25])
    assert t[2] == np.inf  # past the horizon


# ------------------------------------------------------------------ training


SMALL = sim.SimConfig(clip_s=60.0, horizon_s=600.0)


def _small_run(iterations: int) -> learned.Policy:
    pool = sim.trace_pool(sim.generated([("fcc", s) for s in range(1000, 1008)] + [("hsdpa", s) for s in range(1000, 1008)]),
                          SMALL)
    config = train.TrainConfig(seed=3, iterations=iterations, batch=16, weights={"fcc": 0.5, "hsdpa": 0.5})
    return train.train(config, SMALL, pool=pool)[0]


def test_training_is_reproducible() -> None:
    a, b = _small_run(3), _small_run(3)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in learned.LAYERS)


def test_a_short_seeded_training_beats_a_random_policy() -> None:
    trained = _small_run(150)
    held_out = train.held_out_sessions(SMALL, seeds=range(2000, 2008), offsets=1)
    sessions = train.Sessions(pool=held_out.pool, index=held_out.index[:16], offset_s=held_out.offset_s[:16],
                              family=held_out.family[:16])  # fcc and hsdpa only
    ours = train.mean_qoe(trained, sessions, SMALL).mean()
    rand = train.mean_qoe(sim.RandomPolicy(levels=8, rng=np.random.default_rng(0)), sessions, SMALL).mean()
    assert ours > rand + 20, (ours, rand)
