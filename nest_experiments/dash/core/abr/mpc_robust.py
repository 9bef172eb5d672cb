"""``mpc_robust``: robust MPC (the prediction divided by 1 + the largest recent error)."""

from __future__ import annotations

from nest_experiments.dash.core.abr.mpc import Mpc


class RobustMpc(Mpc):
    """Robust MPC: the prediction divided by ``1 + max`` past error (see :class:`Mpc`)."""

    name = "mpc_robust"
    robust = True
