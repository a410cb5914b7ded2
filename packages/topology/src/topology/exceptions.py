"""Errors raised by topology. Each names the setting, the value seen and a fix."""

from __future__ import annotations

__all__ = ["TopologyError"]


class TopologyError(ValueError):
    """The requested counts, devices or CPU budget cannot form a valid placement.

    The message names the offending values and what to change (for instance the valid
    collector counts for this ``num_envs``).
    """
