"""``/proc/net/netstat`` -> counters of one group (e.g. ``MPTcpExt``: the MPTCP MIB).

The file holds pairs of lines, one of names and one of values, each starting
with the group's name: ``MPTcpExt: MPCapableSYNRX ...`` then ``MPTcpExt: 1 ...``.
"""

from __future__ import annotations


def group_counters(text: str, group: str) -> dict[str, int]:
    """The counters of ``group`` (``{}`` when the kernel has no such group)."""
    rows = [line.split() for line in text.splitlines() if line.startswith(f"{group}:")]
    if len(rows) != 2:
        return {}
    names, values = rows
    if len(names) != len(values):
        raise ValueError(f"/proc/net/netstat: {group} has {len(names) - 1} names and {len(values) - 1} values")
    return {name: int(value) for name, value in zip(names[1:], values[1:], strict=True)}
