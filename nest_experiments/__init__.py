"""nest_experiments: namespace-based emulation for DASH QoE research (TCP, MPTCP, QUIC, AQM)."""

from __future__ import annotations

__version__ = "0.1.0"
