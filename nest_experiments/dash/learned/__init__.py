"""A learned (Pensieve-style) ABR: numpy inference, a chunk-level simulator and an actor-critic trainer.

- :mod:`.policy`: the policy network's inference and its input features (numpy only; the
  ``pensieve`` ABR of :mod:`nest_experiments.dash.abr` uses it with the shipped weights,
  ``pensieve.npz``);
- :mod:`.sim`: the player on bandwidth traces, segment by segment, many sessions at once (numpy);
- :mod:`.train`: the actor-critic trainer (numpy), the held-out comparison and the learning curve.

Imports flow one way: ``policy`` (numpy) <- ``dash.abr`` <- ``sim`` <- ``train``. This
``__init__`` imports nothing, so that ``dash.abr`` can import ``policy`` without a cycle.
"""
