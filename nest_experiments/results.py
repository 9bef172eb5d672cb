"""The public API for a sweep's run folders: ``results.load`` (see :mod:`nest_experiments.analysis.results`)::

    from nest_experiments import results
    r = results.load("results/pie_dumbbell")
"""

from __future__ import annotations

from nest_experiments.analysis.results import Results, load

__all__ = ["Results", "load"]
