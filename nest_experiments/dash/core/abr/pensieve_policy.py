"""The learned ABR's policy network: input features and inference, numpy only.

The state is Pensieve's (Mao et al., SIGCOMM 2017; hongzimao/pensieve
``sim/a3c.py``, ``rl_server/rl_server_no_training.py``), with its
normalisations:

- the last segment's bitrate / the top bitrate (1 value);
- the buffer in seconds / 10 (``BUFFER_NORM_FACTOR``) (1);
- the last :data:`HISTORY` segments' throughput, ``bytes / (t_last_byte -
  t_request)`` in MB/s (bit/s / 8e6, Pensieve's bytes per ms / 1000), oldest
  first, zeros before the first segment (8);
- the same segments' download times ``t_last_byte - t_request`` / 10 s (8);
- the next segment's size at every level, in MB (one per level of the ladder);
- the segments left / :data:`SEGMENTS_CAP` (48, ``CHUNK_TIL_VIDEO_END_CAP``), at most 1.

The network is smaller than Pensieve's (no 1-D convolutions): two tanh
layers of :data:`HIDDEN` units and a softmax over the ladder's levels, so
that a decision costs a few microseconds of numpy. Inference picks the most
probable level (Pensieve samples from the distribution; we want
reproducible runs).

The first segment is :data:`FIRST_LEVEL`, not the network's choice (as
Pensieve's ``DEFAULT_QUALITY`` and our MPC): eq. (1) as our player counts it
has no term for the start-up delay (a stall is only what interrupts
playback), so a policy free to choose the first segment learned to start at
the top level, at the price of a median start-up of 17 s in the simulator.

Weights are an ``.npz`` file: the actor's ``w0, b0, w1, b1, w2, b2``, the
``bitrates_bps`` of the ladder it was trained on and its
``segment_duration_s``, and ``meta`` (a JSON string: how it was trained).
:data:`DEFAULT_WEIGHTS` is the policy shipped with the project.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from nest_experiments.errors import ConfigError

HISTORY = 8
HIDDEN = 64
BUFFER_NORM_S = 10.0
THROUGHPUT_NORM_BPS = 8e6
DOWNLOAD_NORM_S = 10.0
SIZE_NORM_BYTES = 1e6
SEGMENTS_CAP = 48
FIRST_LEVEL = 0  # the first segment, before anything was measured: not the network's choice (see the module's doc)
DEFAULT_WEIGHTS = Path(__file__).with_name("pensieve.npz")
LAYERS = ("w0", "b0", "w1", "b1", "w2", "b2")


def feature_count(levels: int) -> int:
    """Inputs of the network for a ladder of ``levels`` levels."""
    return 2 + 2 * HISTORY + levels + 1


def features(
    *,
    last_bitrate_bps: np.ndarray,
    top_bitrate_bps: float,
    buffer_s: np.ndarray,
    throughput_bps: np.ndarray,
    download_s: np.ndarray,
    next_sizes_bytes: np.ndarray,
    segments_left: np.ndarray,
) -> np.ndarray:
    """The network's input for a batch: shape ``(batch, feature_count(levels))``.

    ``throughput_bps`` and ``download_s`` are ``(batch, HISTORY)``, oldest first
    (zeros where there is no segment yet); ``next_sizes_bytes`` is ``(batch, levels)``.
    """
    return np.concatenate(
        [
            (np.asarray(last_bitrate_bps, float) / top_bitrate_bps)[:, None],
            (np.asarray(buffer_s, float) / BUFFER_NORM_S)[:, None],
            np.asarray(throughput_bps, float) / THROUGHPUT_NORM_BPS,
            np.asarray(download_s, float) / DOWNLOAD_NORM_S,
            np.asarray(next_sizes_bytes, float) / SIZE_NORM_BYTES,
            (np.minimum(np.asarray(segments_left, float), SEGMENTS_CAP) / SEGMENTS_CAP)[:, None],
        ],
        axis=1,
    )


def init_mlp(rng: np.random.Generator, sizes: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, zero biases, for layers of ``sizes`` (inputs first)."""
    params: dict[str, np.ndarray] = {}
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        limit = np.sqrt(6.0 / (n_in + n_out))
        params[f"w{i}"] = rng.uniform(-limit, limit, size=(n_in, n_out))
        params[f"b{i}"] = np.zeros(n_out)
    return params


def mlp_forward(params: dict[str, np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    """Activations of every layer (input first, the last one linear): tanh hidden layers."""
    out = [x]
    layers = len(params) // 2
    for i in range(layers):
        z = out[-1] @ params[f"w{i}"] + params[f"b{i}"]
        out.append(np.tanh(z) if i < layers - 1 else z)
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A trained actor: the levels' probabilities for a batch of feature rows."""

    params: dict[str, np.ndarray]
    bitrates_bps: tuple[int, ...]
    segment_duration_s: float
    meta: dict[str, Any] = field(default_factory=dict)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        return softmax(mlp_forward(self.params, x)[-1])

    def act(self, x: np.ndarray) -> np.ndarray:
        """The most probable level of every row (ties: the lowest)."""
        return np.argmax(mlp_forward(self.params, x)[-1], axis=1)

    def save(self, path: Path) -> None:
        """Write the ``.npz`` (float32: half the size, and plenty for a policy)."""
        arrays: dict[str, Any] = {k: self.params[k].astype(np.float32) for k in LAYERS}
        arrays.update(bitrates_bps=np.asarray(self.bitrates_bps, dtype=np.int64),
                      segment_duration_s=np.asarray(self.segment_duration_s),
                      meta=np.asarray(json.dumps(self.meta, sort_keys=True)))
        np.savez_compressed(path, **arrays)


def read_policy(path: Path) -> Policy:
    """Load an ``.npz`` written by :meth:`Policy.save`; a bad file raises :class:`ConfigError`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            params = {k: np.asarray(data[k], dtype=np.float64) for k in LAYERS}
            bitrates = tuple(int(b) for b in data["bitrates_bps"])
            seg = float(data["segment_duration_s"])
            meta = json.loads(str(data["meta"]))
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"abr.pensieve.weights ({path})", f"cannot load the policy: {exc}") from exc
    expected = feature_count(len(bitrates))
    if params["w0"].shape[0] != expected or params["w2"].shape[1] != len(bitrates):
        raise ConfigError(f"abr.pensieve.weights ({path})",
                          f"the network's shape does not fit its {len(bitrates)}-level ladder")
    return Policy(params=params, bitrates_bps=bitrates, segment_duration_s=seg, meta=meta)


@lru_cache(maxsize=4)
def load_policy(path: str | None = None) -> Policy:
    """The policy in ``path`` (default: the shipped :data:`DEFAULT_WEIGHTS`), loaded once per process."""
    return read_policy(Path(path) if path else DEFAULT_WEIGHTS)
