"""Offloads off in-process: the ``ETHTOOL_SFEATURES`` ioctl that ``ethtool -K`` sends, without its process.

``ethtool -K DEV tso off gso off gro off tx-udp-segmentation off`` inside a
namespace costs two processes (``ip netns exec`` and ``ethtool``), ~0.5 s
under TCG, and a run turns offloads off on a dozen interfaces (the shaped
links, the captured routers' links). Here the same request goes from this
thread, inside the namespace, over a socket's ``SIOCETHTOOL`` ioctl: the
device's feature names (``ETHTOOL_GSTRINGS`` of ``ETH_SS_FEATURES``), then
``ETHTOOL_SFEATURES`` clearing the features :data:`OFF` names, then
``ETHTOOL_GFEATURES`` to read back that each is off — what ethtool itself
does (not its legacy per-offload ioctls: ``ETHTOOL_STSO`` leaves the newer
TCP segmentation features such as ``tx-tcp-accecn-segmentation`` on). The
struct layouts are those of ``<linux/ethtool.h>`` (stable kernel ABI).
"""

from __future__ import annotations

import ctypes
import fcntl
import re
import socket
import struct

from nest_experiments.errors import NetworkSetupError
from nest_experiments.net.procs import in_netns

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS, ETHTOOL_GSSET_INFO, ETHTOOL_GFEATURES, ETHTOOL_SFEATURES = 0x1B, 0x37, 0x3A, 0x3B
ETH_SS_FEATURES, ETH_GSTRING_LEN = 4, 32
IFNAMSIZ, IFREQ_SIZE = 16, 40

#: What ``tso off gso off gro off tx-udp-segmentation off`` clears: every TCP segmentation feature (ethtool's
#: "tso" is all of them), generic segmentation, generic receive offload, UDP segmentation.
OFF = re.compile(r"tx-tcp[0-9a-z-]*-segmentation|tx-generic-segmentation|rx-gro|tx-udp-segmentation")


def offloads_off(ns: str, dev: str) -> list[str]:
    """Clear the :data:`OFF` features of ``dev`` in namespace ``ns``; return their names. Raises
    :class:`NetworkSetupError` when the device has none of them, or one is still on after the request."""
    with in_netns(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        names = feature_names(sock, dev)
        bits = [i for i, name in enumerate(names) if OFF.fullmatch(name)]
        if not bits:
            raise NetworkSetupError(f"offloads on {ns}/{dev}: the device names none of the segmentation features")
        _set_features(sock, dev, len(names), bits)
        active = _active_features(sock, dev, len(names))
        still_on = [names[i] for i in bits if active[i // 32] >> (i % 32) & 1]
        if still_on:
            raise NetworkSetupError(f"offloads on {ns}/{dev}: {', '.join(still_on)} still on after turning them off")
        return [names[i] for i in bits]
    finally:
        sock.close()


def feature_names(sock: socket.socket, dev: str) -> list[str]:
    """The device's feature names, in bit order."""
    info = _ethtool(sock, dev, struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
    _, _, mask, count = struct.unpack("=IIQI", info)
    if not mask & (1 << ETH_SS_FEATURES):
        raise NetworkSetupError(f"ethtool on {dev}: the device lists no features")
    data = _ethtool(sock, dev, struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count) +
                    bytes(count * ETH_GSTRING_LEN))
    raw = data[12:]
    return [raw[i * ETH_GSTRING_LEN:(i + 1) * ETH_GSTRING_LEN].split(b"\0", 1)[0].decode() for i in range(count)]


def _blocks(count: int) -> int:
    return (count + 31) // 32


def _set_features(sock: socket.socket, dev: str, count: int, bits: list[int]) -> None:
    valid = [0] * _blocks(count)
    for i in bits:
        valid[i // 32] |= 1 << (i % 32)
    body = b"".join(struct.pack("=II", v, 0) for v in valid)  # valid: these features; requested: off
    _ethtool(sock, dev, struct.pack("=II", ETHTOOL_SFEATURES, len(valid)) + body)


def _active_features(sock: socket.socket, dev: str, count: int) -> list[int]:
    n = _blocks(count)
    out = _ethtool(sock, dev, struct.pack("=II", ETHTOOL_GFEATURES, n) + bytes(16 * n))
    return [struct.unpack_from("=IIII", out, 8 + 16 * k)[2] for k in range(n)]  # available, requested, active, ...


def _ethtool(sock: socket.socket, dev: str, request: bytes) -> bytes:
    """One SIOCETHTOOL request: ``request`` in a buffer the ifreq points at; the buffer as the kernel left it."""
    buf = ctypes.create_string_buffer(request, len(request))
    ifreq = struct.pack(f"{IFNAMSIZ}sP", dev.encode()[:IFNAMSIZ - 1], ctypes.addressof(buf))
    ifreq += bytes(IFREQ_SIZE - len(ifreq))
    try:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    except OSError as exc:
        raise NetworkSetupError(f"ethtool on {dev}: {exc.strerror or exc}") from None
    return buf.raw
