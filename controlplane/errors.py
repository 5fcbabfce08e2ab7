"""The one error of the test stack: something it needs could not be built, started or reached."""

from __future__ import annotations


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached."""
