"""The h3 transport's Python QUIC stacks (qh3, aioquic) load with the same API; an unknown one is refused."""

from __future__ import annotations

import pytest

from nest_experiments.dash import transports
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
