"""Actor-critic training of the learned ABR in the simulator (numpy only), and its held-out comparison.

Pensieve's method (A3C: hongzimao/pensieve ``sim/a3c.py``) without the
asynchrony: every iteration plays a batch of sessions in
:mod:`~nest_experiments.training.sim` with actions sampled from the
actor, each on a trace drawn from the training families and started at a
random point of it; the reward of a segment is eq. (1)'s term; the return
is discounted (``gamma``) to the session's end. The critic (same shape as
the actor, one output) learns the return (divided by
``value_scale``); the actor follows the advantage (return - value,
normalised over the batch) plus an entropy bonus that decays linearly from
``entropy_start`` to ``entropy_end``; the learning rates decay linearly to
``lr_end_fraction`` of theirs. With a validation set, the greedy policy is
evaluated every ``eval_every`` iterations and the best one is kept
(``keep_best``: model selection on sessions that are neither trained on nor
used in the held-out comparison). Gradients are written out by hand for
the two-layer tanh networks (:mod:`~nest_experiments.dash.core.abr.pensieve_policy`)
and applied with Adam. Everything random comes from one
``numpy.random.Generator(seed)``: the same seed gives the same weights.

Traces: the built-in generators (:mod:`nest_experiments.config.traces`); the
seeded families (``fcc``, ``hsdpa``) train on seeds from
:data:`TRAIN_SEEDS` and are tested on :data:`TEST_SEEDS`, both away from
the seeds 1-25 that ``experiments/abr_quic_tcp.toml`` plays; the fixed
patterns (``dh``, ``dl``, ``dvl``, ``h2eval``) are one trace each, so they
differ between training and test only in where the session starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nest_experiments.dash.core.abr import pensieve_policy as learned
from nest_experiments.training import sim

TRAIN_SEEDS = range(1000, 1400)
TEST_SEEDS = range(2000, 2040)
PATTERNS = ("dh", "dl", "dvl", "h2eval")
# the share of training sessions per family (the synthetic fcc/hsdpa stand for the paper's real sets)
FAMILY_WEIGHTS = {"fcc": 0.4, "hsdpa": 0.4, "h2eval": 0.08, "dh": 0.05, "dl": 0.05, "dvl": 0.02}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    seed: int = 1
    iterations: int = 1500
    batch: int = 64
    hidden: int = learned.HIDDEN
    gamma: float = 0.99
    actor_lr: float = 1e-3
    critic_lr: float = 3e-3
    entropy_start: float = 0.3
    entropy_end: float = 0.01
    value_scale: float = 20.0
    lr_end_fraction: float = 0.1  # both learning rates decay linearly to this fraction of theirs
    eval_every: int = 50
    keep_best: bool = True  # return the actor of the best validation evaluation (when there is a validation set)
    train_seeds: Sequence[int] = TRAIN_SEEDS
    weights: dict[str, float] = field(default_factory=lambda: dict(FAMILY_WEIGHTS))


@dataclass(frozen=True, kw_only=True)
class Curve:
    """The learning curve: the training batches' mean QoE, and the greedy policy's on the validation sessions."""

    iteration: list[int]
    train_qoe: list[float]
    eval_iteration: list[int]
    eval_qoe: list[float]
    seconds: float


# ----------------------------------------------------------------- sessions


@dataclass(frozen=True, kw_only=True)
class Sessions:
    """A fixed set of sessions: each a trace of a pool and a start offset."""

    pool: sim.TracePool
    index: np.ndarray
    offset_s: np.ndarray
    family: tuple[str, ...]

    def cum_bits(self) -> np.ndarray:
        return self.pool.sessions(self.index, self.offset_s)


def family_of(source: str) -> str:
    return source.split("(")[0]


def training_pool(config: sim.SimConfig, seeds: Sequence[int]) -> sim.TracePool:
    spec = [(f, s) for f in ("fcc", "hsdpa") for s in seeds] + [(p, 1) for p in PATTERNS]
    return sim.trace_pool(sim.generated(spec), config)


def draw_sessions(pool: sim.TracePool, batch: int, rng: np.random.Generator, weights: dict[str, float]) -> Sessions:
    """``batch`` sessions: a family by ``weights``, a trace of it, a start in its first period (whole steps)."""
    families = [family_of(n) for n in pool.names]
    names = sorted(weights)
    chosen = rng.choice(len(names), size=batch, p=np.array([weights[n] for n in names]) / sum(weights.values()))
    members = {n: np.flatnonzero([f == n for f in families]) for n in names}
    index = np.array([rng.choice(members[names[c]]) for c in chosen])
    steps = np.floor(pool.periods_s[index] / pool.step_s).astype(int)
    offset = rng.integers(0, np.maximum(steps, 1)) * pool.step_s
    return Sessions(pool=pool, index=index, offset_s=offset, family=tuple(families[i] for i in index))


def held_out_sessions(config: sim.SimConfig, *, seeds: Sequence[int] = TEST_SEEDS, offsets: int = 8) -> Sessions:
    """Held-out sessions: fcc and hsdpa on ``seeds`` from their start, each pattern from ``offsets`` evenly spaced starts."""
    spec = [(f, s) for f in ("fcc", "hsdpa") for s in seeds] + [(p, 1) for p in PATTERNS]
    pool = sim.trace_pool(sim.generated(spec), config)
    n = 2 * len(seeds)
    index = np.concatenate([np.arange(n), np.repeat(np.arange(n, n + len(PATTERNS)), offsets)])
    frac = np.tile(np.arange(offsets) / offsets, len(PATTERNS))
    offset = np.concatenate([np.zeros(n), np.floor(pool.periods_s[n:].repeat(offsets) * frac / pool.step_s) * pool.step_s])
    return Sessions(pool=pool, index=index, offset_s=offset, family=tuple(family_of(pool.names[i]) for i in index))


# ------------------------------------------------------------------ gradients


def mlp_backward(params: dict[str, np.ndarray], acts: list[np.ndarray], d_out: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of a loss w.r.t. the parameters, given its gradient w.r.t. the last (linear) layer's output."""
    grads: dict[str, np.ndarray] = {}
    delta = d_out
    for i in reversed(range(len(params) // 2)):
        grads[f"w{i}"] = acts[i].T @ delta
        grads[f"b{i}"] = delta.sum(axis=0)
        if i:
            delta = (delta @ params[f"w{i}"].T) * (1 - acts[i] ** 2)
    return grads


@dataclass
class Adam:
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: dict[str, np.ndarray] = field(default_factory=dict)
    v: dict[str, np.ndarray] = field(default_factory=dict)

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for k, g in grads.items():
            m = self.m[k] = self.beta1 * self.m.get(k, np.zeros_like(g)) + (1 - self.beta1) * g
            v = self.v[k] = self.beta2 * self.v.get(k, np.zeros_like(g)) + (1 - self.beta2) * g * g
            m_hat, v_hat = m / (1 - self.beta1**self.t), v / (1 - self.beta2**self.t)
            params[k] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def discounted(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Returns to the end of each session: ``(batch, segments)``."""
    out = np.zeros_like(rewards)
    running = np.zeros(len(rewards))
    for i in reversed(range(rewards.shape[1])):
        running = rewards[:, i] + gamma * running
        out[:, i] = running
    return out


@dataclass
class _Recorder:
    """A policy that samples from the actor and keeps the inputs and actions for the update."""

    actor: dict[str, np.ndarray]
    bitrates_bps: np.ndarray
    rng: np.random.Generator
    xs: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)

    def reset(self, batch: int) -> None:
        self.xs, self.actions = [], []

    def decide(self, step: sim.Step) -> np.ndarray:
        if step.index == 0:  # not the policy's choice (policy.FIRST_LEVEL): not trained on either
            return np.full(len(step.buffer_s), learned.FIRST_LEVEL)
        x = sim.observation(step, self.bitrates_bps)
        p = learned.softmax(learned.mlp_forward(self.actor, x)[-1])
        a = (p.cumsum(axis=1) > self.rng.random((len(p), 1))).argmax(axis=1)
        self.xs.append(x)
        self.actions.append(a)
        return a


def update(actor: dict[str, np.ndarray], critic: dict[str, np.ndarray], opts: tuple[Adam, Adam], rec: _Recorder,
           rewards: np.ndarray, *, config: TrainConfig, entropy: float) -> None:
    """One actor-critic step on a batch of whole sessions (``rewards``: those of the segments the actor chose)."""
    x = np.stack(rec.xs, axis=1).reshape(-1, rec.xs[0].shape[1])  # (batch x segments, features), session-major
    a = np.stack(rec.actions, axis=1).reshape(-1)
    ret = discounted(rewards, config.gamma).reshape(-1) / config.value_scale
    c_acts = learned.mlp_forward(critic, x)
    value = c_acts[-1][:, 0]
    adv = ret - value
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    n = len(x)
    opts[1].step(critic, mlp_backward(critic, c_acts, ((value - ret) / n)[:, None]))
    a_acts = learned.mlp_forward(actor, x)
    p = learned.softmax(a_acts[-1])
    logp = np.log(p + 1e-12)
    h = -(p * logp).sum(axis=1, keepdims=True)
    d_logits = p.copy()
    d_logits[np.arange(n), a] -= 1.0
    d_logits *= adv[:, None]  # policy gradient of -adv x log p(a)
    d_logits += entropy * p * (logp + h)  # gradient of -entropy x H
    opts[0].step(actor, mlp_backward(actor, a_acts, d_logits / n))


# -------------------------------------------------------------------- train


def train(
    config: TrainConfig,
    sim_config: sim.SimConfig,
    *,
    validation: Sessions | None = None,
    pool: sim.TracePool | None = None,
    progress: Callable[[int, float, float | None], None] | None = None,
) -> tuple[learned.Policy, Curve]:
    """Train from ``config.seed``; return the greedy policy and its learning curve."""
    rng = np.random.default_rng(config.seed)
    video = sim.video_of(sim_config)
    levels, n_in = len(video.bitrates_bps), learned.feature_count(len(video.bitrates_bps))
    actor = learned.init_mlp(rng, (n_in, config.hidden, config.hidden, levels))
    critic = learned.init_mlp(rng, (n_in, config.hidden, config.hidden, 1))
    opts = (Adam(lr=config.actor_lr), Adam(lr=config.critic_lr))
    pool = pool or training_pool(sim_config, config.train_seeds)
    rec = _Recorder(actor=actor, bitrates_bps=video.bitrates_bps, rng=rng)
    curve = Curve(iteration=[], train_qoe=[], eval_iteration=[], eval_qoe=[], seconds=0.0)
    best: tuple[int, dict[str, np.ndarray]] = (0, actor)
    start = time.process_time()
    for it in range(config.iterations):
        sessions = draw_sessions(pool, config.batch, rng, config.weights)
        played = sim.simulate(sessions.cum_bits(), rec, video=video, config=sim_config, step_s=pool.step_s)
        frac = it / max(config.iterations - 1, 1)
        entropy = config.entropy_start + (config.entropy_end - config.entropy_start) * frac
        opts[0].lr, opts[1].lr = (lr * (1 - (1 - config.lr_end_fraction) * frac)
                                  for lr in (config.actor_lr, config.critic_lr))
        update(actor, critic, opts, rec, played.rewards[:, 1:], config=config, entropy=entropy)
        curve.iteration.append(it)
        curve.train_qoe.append(float(played.qoe.mean()))
        evaluated = None
        if validation is not None and (it % config.eval_every == 0 or it == config.iterations - 1):
            evaluated = float(mean_qoe(_policy(actor, video, config), validation, sim_config).mean())
            curve.eval_iteration.append(it)
            curve.eval_qoe.append(evaluated)
            if config.keep_best and evaluated >= max(curve.eval_qoe):
                best = (it, {k: v.copy() for k, v in actor.items()})
        if progress is not None:
            progress(it, curve.train_qoe[-1], evaluated)
    chosen_it, chosen = best if validation is not None and config.keep_best else (config.iterations - 1, actor)
    final = _policy(chosen, video, config, meta={"trainer": "nest_experiments.training.train", "seed": config.seed,
                                                 "iterations": config.iterations, "batch": config.batch,
                                                 "kept_iteration": chosen_it, "ladder": sim_config.ladder,
                                                 "max_buffer_s": sim_config.max_buffer_s, "rtt_s": sim_config.rtt_s})
    return final, Curve(iteration=curve.iteration, train_qoe=curve.train_qoe, eval_iteration=curve.eval_iteration,
                        eval_qoe=curve.eval_qoe, seconds=time.process_time() - start)


def _policy(actor: dict[str, np.ndarray], video: sim.Video, config: TrainConfig,
            meta: dict[str, object] | None = None) -> learned.Policy:
    return learned.Policy(params={k: v.copy() for k, v in actor.items()},
                          bitrates_bps=tuple(int(b) for b in video.bitrates_bps),
                          segment_duration_s=video.segment_duration_s, meta=dict(meta or {}))


def mean_qoe(policy: learned.Policy | sim.SimPolicy, sessions: Sessions, sim_config: sim.SimConfig) -> np.ndarray:
    """Each session's QoE (eq. 1) under ``policy`` (a trained network is played greedily)."""
    return play(policy, sessions, sim_config).qoe


def play(policy: learned.Policy | sim.SimPolicy, sessions: Sessions, sim_config: sim.SimConfig) -> sim.Record:
    chooser = sim.NetworkPolicy(policy=policy) if isinstance(policy, learned.Policy) else policy
    return sim.simulate(sessions.cum_bits(), chooser, video=sim.video_of(sim_config), config=sim_config,
                        step_s=sessions.pool.step_s)
