"""Compact value formatting shared by the rich and plain consoles."""

from __future__ import annotations

import math

__all__ = ["COUNTS", "compact", "duration", "level_style", "metric", "percent_bar"]

_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))

COUNTS = frozenset({"async/weight_version", "async/policy_lag", "async/ring_fill"})
"""Scalars that count things (versions, slots): shown as whole numbers, never ``252.0``."""


def compact(value: float | None, width: int = 9) -> str:
    """``value`` in at most ``width`` characters: 12345 -> ``12.3k``, 0.000123 -> ``1.23e-04``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    for scale, suffix in _SUFFIXES:
        if magnitude >= scale:
            return f"{value / scale:.{_decimals(magnitude / scale)}f}{suffix}"[:width]
    if magnitude >= 0.01:
        return f"{value:.{_decimals(magnitude)}f}"[:width]
    return f"{value:.2e}"[:width]


def metric(key: str, value: float | None) -> str:
    """A scalar as the consoles show it: a count (:data:`COUNTS`) whole below 100k, else :func:`compact`."""
    if key in COUNTS and value is not None and math.isfinite(value) and abs(value) < 1e5:
        return str(round(value))
    return compact(value)


def _decimals(magnitude: float) -> int:
    """Decimals that keep three significant digits for a magnitude in [0.01, 1000)."""
    if magnitude >= 100:
        return 1
    if magnitude >= 10:
        return 2
    return 3


def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s`` or ``12s``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def percent_bar(fraction: float, width: int) -> str:
    """A bar of ``width`` cells, ``fraction`` (clamped to [0, 1]) of them filled."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "█" * filled + "░" * (width - filled)


def level_style(percent: float) -> str:
    """Health colour of a load percentage: green below 70, yellow below 90, red otherwise."""
    if percent < 70:
        return "green"
    if percent < 90:
        return "yellow"
    return "red"
