"""nest_experiments: namespace-based emulation for DASH QoE research (TCP, MPTCP, QUIC, AQM)."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

#: The project folder (the package lives in it; topologies/, media/, results/ beside it).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
