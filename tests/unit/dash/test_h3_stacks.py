"""The h3 transport's Python QUIC stacks (qh3, aioquic) load with the same API; an unknown one is refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nest_experiments.dash.http import transports
from nest_experiments.errors import ConfigError


@pytest.mark.parametrize("name", transports.PY_QUIC_STACKS)
def test_each_stack_loads_and_builds_a_client_configuration(name: str) -> None:
    stack = transports.quic_stack(name)
    assert stack.name == name and stack.version[0].isdigit()
    opts = transports.FetcherOptions(clock=lambda: 0.0, h3_client=name)
    config = stack.configuration(is_client=True, alpn_protocols=list(stack.alpn), max_data=opts.window,
                                 max_stream_data=opts.window, **stack.options(opts))  # fmt: skip
    assert config.max_data == opts.window and "h3" in config.alpn_protocols
    cls = transports._protocol_class(stack)
    assert issubclass(cls, stack.protocol) and issubclass(cls, transports._H3Client)


def test_qh3_is_the_default_and_unknown_stacks_are_refused() -> None:
    assert transports.FetcherOptions(clock=lambda: 0.0).h3_client == "qh3"
    with pytest.raises(ConfigError, match="h3_client"):
        transports.quic_stack("curl")


@pytest.mark.parametrize(("transport", "h3_client", "loaded"),
                         [("h3", "qh3", "qh3"), ("race", "aioquic", "aioquic"), ("h3", "quic-go", None),
                          ("tcp", "qh3", None)])  # fmt: skip
def test_the_player_imports_its_quic_stack_before_it_says_ready(transport: str, h3_client: str,
                                                                 loaded: str | None) -> None:
    # a fresh interpreter: this one may have imported both stacks already
    code = ("import sys\n"
            "from nest_experiments.dash.players import client\n"
            "before = {m for m in ('qh3', 'aioquic') if m in sys.modules}\n"
            "client.warm(client.parse_args(sys.argv[1:]))\n"
            "print(sorted(before), sorted(m for m in ('qh3', 'aioquic') if m in sys.modules))\n")
    argv = ["--server", "10.0.0.1", "--port", "443", "--transport", transport, "--h3-client", h3_client,
            "--mpd", "/m.mpd", "--t0", "0", "--out", "/nonexistent"]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", f"['{loaded}']" if loaded else "[]"]
