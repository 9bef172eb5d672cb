"""A sweep's progress lines: one as each run starts and one as it ends, with where it ran, the overall count and an
estimate of the time left. The same for a one-machine sweep and a cluster's (:mod:`nest_experiments.runs.cluster`).

Pure apart from writing to ``out``. The estimate is the mean duration of the runs that ran in this sweep (runs
skipped as completed earlier do not count) times the runs still to finish, divided by how many run at once
(``slots``: 1 on one machine, a cluster's emulator workers).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(kw_only=True)
class Progress:
    total: int
    slots: int = 1
    out: TextIO = field(default=sys.stderr)
    started: int = 0
    finished: int = 0
    seconds: list[float] = field(default_factory=list)  # durations of the runs that ran (not skipped)

    def skip(self, name: str) -> None:
        self.finished += 1
        self.say(f"[{self.finished}/{self.total}] {name}: completed earlier, skipped")

    def start(self, name: str, *, duration_s: float, where: str) -> None:
        self.started += 1
        self.say(f"[{self.finished}/{self.total} done] {name}: running ({duration_s:g} s) on {where}{self._eta()}")

    def end(self, name: str, *, status: str, seconds: float, where: str, reason: str = "") -> None:
        self.finished += 1
        self.seconds.append(seconds)
        note = f": {reason}" if reason else ""
        self.say(f"[{self.finished}/{self.total} done] {name}: {status} in {seconds:.1f} s on {where}{note}"
                  f"{self._eta()}")

    def eta_s(self) -> float | None:
        """Seconds left: mean run time x runs still to finish / runs at once (None before a run has ended)."""
        if not self.seconds:
            return None
        remaining = self.total - self.finished
        return sum(self.seconds) / len(self.seconds) * remaining / max(1, min(self.slots, remaining or 1))

    def _eta(self) -> str:
        left = self.eta_s()
        if left is None or self.finished >= self.total:
            return ""
        return f", about {left / 60:.1f} min left"

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)
