"""The strict HTTP/1.1 head parser and formatter used by the DASH server and client."""

from __future__ import annotations

import pytest

from nest_experiments.dash.http.http1 import (
    MAX_HEAD,
    HttpError,
    format_request,
    format_response_head,
    parse_request_head,
    parse_response_head,
)


def test_request_round_trip() -> None:
    req = parse_request_head(format_request(target="/v/seg-1.m4s?x=1", host="10.0.0.2:8080"))
    assert (req.method, req.target, req.version) == ("GET", "/v/seg-1.m4s?x=1", "HTTP/1.1")
    assert req.headers["host"] == "10.0.0.2:8080"
    assert req.keep_alive


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", False),
        (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, Upgrade\r\n\r\n", True),
        (b"GET / HTTP/1.0\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
    ],
)
def test_keep_alive_rules(head: bytes, keep_alive: bool) -> None:
    assert parse_request_head(head).keep_alive is keep_alive


def test_repeated_headers_are_joined_and_names_lowered() -> None:
    req = parse_request_head(b"HEAD /a HTTP/1.1\r\nHost: h\r\nAccept: x\r\nACCEPT:  y \r\n\r\n")
    assert req.method == "HEAD"
    assert req.headers["accept"] == "x, y"


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # 1.1 without Host
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        (b"POST / HTTP/1.1\r\nHost: a\r\n\r\n", 405),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\n", 413),
        (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),  # absolute form
        (b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),  # double space
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),  # space before colon
        (b"GET / HTTP/1.1\r\nno-colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: \xe9\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\n", 400),  # not terminated
        (b"GET / HTTP/1.1\r\nHost: " + b"a" * MAX_HEAD + b"\r\n\r\n", 431),
    ],
)
def test_bad_requests_are_rejected_with_a_status(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as info:
        parse_request_head(head)
    assert info.value.status == status


def test_response_round_trip() -> None:
    head = format_response_head(200, {"content-length": "42", "alt-svc": 'h3=":443"'})
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    resp = parse_response_head(head)
    assert (resp.status, resp.content_length, resp.keep_alive) == (200, 42, True)
    assert resp.headers["alt-svc"] == 'h3=":443"'


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
        b"HTTP/1.1 20 OK\r\nContent-Length: 1\r\n\r\n",
        b"HTTP/1.1 200OK\r\nContent-Length: 1\r\n\r\n",
    ],
)
def test_bad_status_lines(head: bytes) -> None:
    with pytest.raises(HttpError):
        parse_response_head(head)


@pytest.mark.parametrize(
    "headers",
    [{}, {"content-length": "-1"}, {"content-length": "1", "transfer-encoding": "chunked"}],
)
def test_body_must_be_framed_by_content_length(headers: dict[str, str]) -> None:
    resp = parse_response_head(format_response_head(200, headers))
    with pytest.raises(HttpError):
        _ = resp.content_length


def test_connection_close_response() -> None:
    head = format_response_head(404, {"content-length": "0", "connection": "close"})
    resp = parse_response_head(head)
    assert resp.status == 404 and not resp.keep_alive
    assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")
