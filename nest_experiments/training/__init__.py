"""The learned (Pensieve-style) ABR's offline side: a chunk-level simulator and an actor-critic trainer (numpy).

- :mod:`.sim`: the player on bandwidth traces (``config.traces``), segment by segment, many sessions at once;
- :mod:`.train`: the actor-critic trainer, the held-out comparison and the learning curve
  (``bench/pensieve_train.py`` runs it and writes the shipped weights).

What the player runs, the policy network's inference and its input features, is the ``pensieve`` ABR of
``dash.core.abr`` (:mod:`nest_experiments.dash.core.abr.pensieve_policy`, the weights ``pensieve.npz`` beside it).
Imports flow one way: ``dash.core.abr`` <- ``sim`` <- ``train``; training may import ``config`` and ``dash``,
and nothing imports training but the bench.
"""
