"""Minimal, strict HTTP/1.1 message heads (pure; no I/O).

Only what a DASH server and client need: GET/HEAD requests without a body,
responses framed by ``Content-Length`` (no chunked coding, no ranges). Anything
else is rejected with :class:`HttpError`, which the server answers with its
``status``.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD = 16 * 1024  # bytes, request or response head including the blank line
_TOKEN = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}


class HttpError(Exception):
    """A message head we do not accept; ``status`` is the answer to give."""

    def __init__(self, status: int, reason: str) -> None:
        self.status = status
        super().__init__(reason)


@dataclass(frozen=True, kw_only=True)
class Request:
    method: str
    target: str
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: dict[str, str]  # lower-case names; repeated names joined with ", "

    @property
    def keep_alive(self) -> bool:
        """RFC 9112 §9.3: 1.1 persists unless ``close``; 1.0 only with ``keep-alive``."""
        tokens = {
            t.strip().lower() for t in self.headers.get("connection", "").split(",")
        }
        if self.version == "HTTP/1.1":
            return "close" not in tokens
        return "keep-alive" in tokens


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: dict[str, str]

    @property
    def content_length(self) -> int:
        return _content_length(self.headers, required=True)

    @property
    def keep_alive(self) -> bool:
        tokens = {
            t.strip().lower() for t in self.headers.get("connection", "").split(",")
        }
        return "close" not in tokens


def _split_head(head: bytes) -> list[str]:
    if len(head) > MAX_HEAD:
        raise HttpError(431, "head too large")
    if not head.endswith(b"\r\n\r\n"):
        raise HttpError(400, "head not terminated by CRLF CRLF")
    try:
        text = head[:-4].decode("ascii")
    except UnicodeDecodeError as exc:
        raise HttpError(400, "non-ASCII byte in head") from exc
    return text.split("\r\n")


def _parse_headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise HttpError(400, f"malformed header line {line!r}")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _content_length(headers: dict[str, str], *, required: bool) -> int:
    if "transfer-encoding" in headers:
        raise HttpError(501, "transfer-encoding not supported")
    raw = headers.get("content-length")
    if raw is None:
        if required:
            raise HttpError(400, "missing content-length")
        return 0
    if not raw.isdigit():
        raise HttpError(400, f"bad content-length {raw!r}")
    return int(raw)


def parse_request_head(head: bytes) -> Request:
    """Parse a request head (``...\\r\\n\\r\\n``); GET/HEAD without a body only."""
    lines = _split_head(head)
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise HttpError(400, f"malformed request line {lines[0]!r}")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported version {version!r}")
    if not target.startswith("/"):
        raise HttpError(400, f"target must be an absolute path: {target!r}")
    headers = _parse_headers(lines[1:])
    if _content_length(headers, required=False):
        raise HttpError(413, "request bodies not supported")
    if method not in ("GET", "HEAD"):
        raise HttpError(405, f"method {method!r} not allowed")
    if version == "HTTP/1.1" and "host" not in headers:
        raise HttpError(400, "HTTP/1.1 request without host")
    return Request(method=method, target=target, version=version, headers=headers)


def parse_response_head(head: bytes) -> Response:
    """Parse a response head; the body must be framed by ``Content-Length``."""
    lines = _split_head(head)
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version != "HTTP/1.1" or not code.isdigit() or rest[3:4] not in ("", " "):
        raise HttpError(400, f"malformed status line {lines[0]!r}")
    return Response(status=int(code), headers=_parse_headers(lines[1:]))


def format_request(*, method: str = "GET", target: str, host: str) -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode(
        "ascii"
    )


def format_response_head(status: int, headers: dict[str, str]) -> bytes:
    reason = REASONS.get(status, "Unknown")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
