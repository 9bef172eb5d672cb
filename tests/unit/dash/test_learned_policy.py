"""The learned ABR's inference: the shipped weights on fixed inputs, in the player and in the simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nest_experiments.dash.content import media
from nest_experiments.dash.core.abr import pensieve_policy as learned
from nest_experiments.dash.core.abr.base import PlayerState, Sample
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.errors import ConfigError
from nest_experiments.training import sim

CLIP_S = 80.0


def simulated(policy: sim.SimPolicy, spec: tuple[tuple[str, int], ...], config: sim.SimConfig) -> sim.Record:
    pool = sim.trace_pool(sim.generated(spec), config)
    return sim.simulate(pool.sessions(np.arange(len(spec)), np.zeros(len(spec))), policy,
                        video=sim.video_of(config), config=config)


# ----------------------------------------------------------------- inference


def state(**kw: object) -> PlayerState:
    hist = tuple(Sample(level=3, bytes=400_000, t_request=4.0 * i, t_first_byte=4.0 * i + 0.08,
                        t_last_byte=4.0 * i + 1.6) for i in range(5))
    base: dict[str, object] = {"now": 20.0, "buffer_s": 8.0, "bitrates_bps": media_rates(), "segment_duration_s": 4.0,
                               "max_buffer_s": 12.0, "last_level": 3, "history": hist, "next_index": 5,
                               "segment_count": 48}
    base.update(kw)
    return PlayerState(**base)  # type: ignore[arg-type]


def media_rates() -> tuple[int, ...]:
    return tuple(lv.bitrate_bps for lv in media.load_ladder("abr_quic_tcp").video.levels)


def test_shipped_policy_is_small_and_fits_the_study_ladder() -> None:
    assert learned.DEFAULT_WEIGHTS.stat().st_size < 300_000
    shipped = learned.load_policy()
    assert shipped.bitrates_bps == media_rates()
    assert shipped.meta["seed"] == 1


def steady(rate_bps: float) -> tuple[Sample, ...]:
    """Eight segments, each at the highest level below ``rate_bps``, downloaded at ``rate_bps`` (80 ms RTT)."""
    rates = media_rates()
    level = max([i for i, b in enumerate(rates) if b <= rate_bps], default=0)
    size = rates[level] * 4 / 8
    return tuple(Sample(level=level, bytes=int(size), t_request=4.0 * i, t_first_byte=4.0 * i + 0.08,
                        t_last_byte=4.0 * i + 0.08 + 8 * size / rate_bps) for i in range(8))


def test_shipped_weights_give_fixed_decisions() -> None:
    abr = create_abr("pensieve")
    assert abr.choose(state()).level == 3  # 2 Mbit/s measured on 5 segments, 8 s buffered
    assert abr.choose(state(buffer_s=0.5, history=state().history[:1], last_level=0)).level == 0
    # 8 s buffered, a steady rate: the level rises with it
    levels = [abr.choose(state(history=steady(r), last_level=steady(r)[-1].level)).level
              for r in (0.3e6, 0.6e6, 1e6, 2e6, 3e6, 5e6)]
    assert levels == [0, 0, 3, 3, 6, 7]
    x = learned.features(last_bitrate_bps=np.array([800e3]), top_bitrate_bps=4e6, buffer_s=np.array([8.0]),
                         throughput_bps=np.array([[0, 0, 0, 2e6, 2e6, 2e6, 2e6, 2e6]]),
                         download_s=np.array([[0, 0, 0, 1.6, 1.6, 1.6, 1.6, 1.6]]),
                         next_sizes_bytes=np.array([[b * 0.5 for b in media_rates()]]), segments_left=np.array([43]))
    p = learned.load_policy().probabilities(x)[0]
    assert p.sum() == pytest.approx(1.0) and int(np.argmax(p)) == 3


def test_the_first_segment_is_the_lowest_level_not_the_networks_choice() -> None:
    first = state(buffer_s=0.0, history=(), last_level=None, next_index=0, now=0.0)
    assert create_abr("pensieve").choose(first).level == learned.FIRST_LEVEL == 0
    config = sim.SimConfig(clip_s=CLIP_S)
    rec = simulated(sim.NetworkPolicy(policy=learned.load_policy()), (("fcc", 5), ("h2eval", 1)), config)
    assert rec.levels[:, 0].tolist() == [0, 0]
    assert (rec.startup_delay_s < 2.0).all()  # one 200 kbit/s segment at >= 1 Mbit/s


def test_pensieve_in_the_player_decides_as_the_network_in_the_simulator() -> None:
    config = sim.SimConfig(clip_s=CLIP_S)
    spec = (("fcc", 5), ("hsdpa", 7), ("h2eval", 1))
    registry = simulated(sim.RegistryPolicy(name="pensieve", max_buffer_s=config.max_buffer_s), spec, config)
    network = simulated(sim.NetworkPolicy(policy=learned.load_policy()), spec, config)
    assert registry.levels.tolist() == network.levels.tolist()


def test_pensieve_on_another_ladder_maps_bitrates() -> None:
    audio = state(bitrates_bps=(64_000, 128_000), last_level=1, history=())
    assert create_abr("pensieve").choose(audio).level in (0, 1)


def test_policy_file_round_trip_and_a_bad_file(tmp_path: Path) -> None:
    shipped = learned.load_policy()
    shipped.save(tmp_path / "p.npz")
    again = learned.read_policy(tmp_path / "p.npz")
    x = np.random.default_rng(0).random((4, learned.feature_count(8)))
    assert again.act(x).tolist() == shipped.act(x).tolist() and again.meta == shipped.meta
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="cannot load the policy"):
        learned.read_policy(tmp_path / "bad.npz")


