"""Parsing of values with units: rates, times, sizes, percentages.

Rates follow tc's meaning of ``bit``/``kbit``/``mbit``/``gbit`` (powers of
1000). tc's ``kbps``/``mbps`` mean *bytes* per second, a classic trap, so they
are refused with a hint. Sizes follow tc too: ``kb`` = 1024 bytes.
"""

from __future__ import annotations

import re

from nest_experiments.errors import ConfigError

_NUM = r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[a-zA-Z%]*)"
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_SIZE_UNITS = {"b": 1, "kb": 1024, "kib": 1024, "mb": 1024**2, "mib": 1024**2}


def _split(path: str, value: object, what: str, example: str) -> tuple[float, str]:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(path, f"expected a {what} such as {example!r}, got {value!r}")
    m = re.fullmatch(_NUM, str(value).strip())
    if m is None:
        raise ConfigError(path, f"expected a {what} such as {example!r}, got {value!r}")
    return float(m.group("num")), m.group("unit").lower()


def parse_rate(path: str, value: object) -> int:
    """``"10mbit"`` -> 10_000_000 (bits per second)."""
    num, unit = _split(path, value, "rate", "10mbit")
    if unit in ("kbps", "mbps", "gbps", "bps"):
        raise ConfigError(path, f"{value!r}: tc reads '{unit}' as bytes/s; write bits, e.g. '10mbit'")
    if unit not in _RATE_UNITS:
        raise ConfigError(path, f"rate {value!r} needs a unit: one of {', '.join(_RATE_UNITS)} (e.g. '10mbit')")
    bps = int(round(num * _RATE_UNITS[unit]))
    if bps <= 0:
        raise ConfigError(path, f"rate must be positive, got {value!r}")
    return bps


def parse_time(path: str, value: object, *, allow_zero: bool = True) -> float:
    """``"5ms"`` -> 0.005 (seconds). A bare number is refused: say the unit."""
    num, unit = _split(path, value, "duration", "5ms")
    if unit not in _TIME_UNITS:
        raise ConfigError(path, f"duration {value!r} needs a unit: one of {', '.join(_TIME_UNITS)} (e.g. '5ms')")
    seconds = num * _TIME_UNITS[unit]
    if seconds == 0 and not allow_zero:
        raise ConfigError(path, f"must be greater than zero, got {value!r}")
    return seconds


def parse_size(path: str, value: object) -> int:
    """``"64kb"`` -> 65536 (bytes); a bare integer is bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = f"{value}b"
    num, unit = _split(path, value, "size", "64kb")
    if unit not in _SIZE_UNITS:
        raise ConfigError(path, f"size {value!r} needs a unit: one of {', '.join(_SIZE_UNITS)}")
    return int(num * _SIZE_UNITS[unit])


def parse_percent(path: str, value: object) -> float:
    """``"1%"`` -> 1.0 (percent, 0..100)."""
    num, unit = _split(path, value, "percentage", "1%")
    if unit != "%" or num > 100:
        raise ConfigError(path, f"expected a percentage between 0% and 100%, got {value!r}")
    return num


def format_time(seconds: float) -> str:
    """0.005 -> ``"5ms"`` (for run names and tc arguments)."""
    us = round(seconds * 1e6)
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    if us % 1000 == 0:
        return f"{us // 1000}ms"
    return f"{us}us"


def format_rate(bps: int) -> str:
    """10_000_000 -> ``"10mbit"``."""
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps % mult == 0:
            return f"{bps // mult}{unit}"
    return f"{bps}bit"
