"""Errors raised by numa-bind. Each names the value seen, what is allowed and how to fix it."""

from __future__ import annotations

__all__ = ["BindingError", "CpuListError"]


class CpuListError(ValueError):
    """A CPU list string (kernel ``cpulist`` format, e.g. ``"0-3,8,10-11"``) is malformed.

    Attributes:
        text: The whole string that failed to parse.
        token: The comma-separated piece that is wrong.
    """

    def __init__(self, text: str, token: str, why: str) -> None:
        self.text = text
        self.token = token
        super().__init__(
            f"malformed CPU list {text!r}: token {token!r} {why}; "
            "write comma-separated CPU ids or ascending ranges, e.g. '0-3,8,10-11'"
        )


class BindingError(ValueError):
    """A binding request names a CPU or NUMA node that does not exist or is not allowed.

    Attributes:
        setting: ``"cpus"`` or ``"nodes"``.
        bad: The requested values that are not allowed.
        allowed: The values this process may use.
    """

    def __init__(self, setting: str, bad: tuple[int, ...], allowed: tuple[int, ...], message: str) -> None:
        self.setting = setting
        self.bad = bad
        self.allowed = allowed
        super().__init__(message)
