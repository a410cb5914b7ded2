"""Errors raised by topology. Each names the setting, the value seen and a fix."""

from __future__ import annotations

__all__ = ["TopologyError"]


class TopologyError(ValueError):
    """The requested counts, devices or CPU budget cannot form a valid placement.

    The message names the offending values and what to change (for instance the valid
    collector counts for this ``num_envs``). A count rule (``fastsac_topology.check_counts``) also says
    which setting it blames, so a caller can word the error its own way.

    Attributes:
        setting: The parameter blamed (``num_collectors``), None when no single one is.
        value: The value seen.
        fix: What is wrong with it and what to do, naming the other settings it depends on.
    """

    def __init__(
        self, message: str, *, setting: str | None = None, value: object = None, fix: str = ""
    ) -> None:
        super().__init__(message)
        self.setting = setting
        self.value = value
        self.fix = fix

    @classmethod
    def of_setting(cls, setting: str, value: object, fix: str) -> TopologyError:
        """The error of one setting, worded ``<setting>=<value> is invalid: <fix>``.

        Args:
            setting: The parameter at fault (``learner_devices``).
            value: The value seen.
            fix: What is wrong with it and what to do.
        """
        return cls(f"{setting}={value!r} is invalid: {fix}", setting=setting, value=value, fix=fix)
