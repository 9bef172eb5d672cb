"""The one exception tree of nest_experiments.

Lower-level errors (subprocess, netlink, OS) are mapped to these at the module
boundaries (``raise ... from exc``); the CLI catches :class:`NestExpError` once
and prints its message as one line.
"""

from __future__ import annotations


class NestExpError(Exception):
    """Base class: every error we raise on purpose derives from it."""


class ConfigError(NestExpError):
    """An experiment file or value is invalid. The message names the key path."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class MissingToolError(NestExpError):
    """A program we need is not installed; the message names the package."""


class KernelFeatureError(NestExpError):
    """The running kernel lacks a feature (qdisc, MPTCP, ...)."""


class NetworkSetupError(NestExpError):
    """Creating or configuring namespaces, links or qdiscs failed or read back wrong."""


class RunError(NestExpError):
    """An application or collector failed during a run."""


class VMError(NestExpError):
    """The VM runtime could not build, boot or run its guest."""


class Interrupted(NestExpError):
    """The run was interrupted by a signal (SIGINT/SIGTERM)."""
