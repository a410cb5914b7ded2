"""One warning when a run's critic values sit at the top of their C51 support (Note [support watch]).

# Note [support watch]
The critics represent returns on a fixed support (``FastSACConfig.value_support``) and the projection
clips every target into it. ``train/qf_max`` is the largest expected value of the projected targets
of the last updates; once it stays within half an atom of the support's top, the targets of the best
states are clipped: the critics no longer tell a good action from a better one there, so the actor's
gradient fades where the policy is best and the returns stop rising (Humanoid's runs:
wiki/benchmarks.md, "The value support's top"). The watch is one more reporter of the run: after
``SATURATED_REPORTS`` fresh reports in a row at the top it logs one warning that names the setting,
the value seen and a wider support, and then stays quiet.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from fastsac_core import FastSACConfig
    from fastsac_trainer.reporting import EvalPoint, Snapshot

__all__ = ["QF_MAX", "SATURATED_REPORTS", "SupportWatch"]

_log = logging.getLogger(__name__)

QF_MAX = "train/qf_max"
"""The scalar the watch reads: the largest expected value of the projected targets."""
SATURATED_REPORTS = 3
"""Fresh reports in a row at the support's top before the warning (one report may be a spike)."""


class SupportWatch:
    """A reporter that warns once when ``train/qf_max`` sits at the top of the critics' support.

    Args:
        agent: The run's agent settings (its support, atom count and reward normalisation).
    """

    def __init__(self, agent: FastSACConfig) -> None:
        low, high = agent.value_support
        self._top = high
        self._margin = (high - low) / (agent.num_atoms - 1) / 2  # half an atom
        if agent.reward_normalization:  # the scale keeps returns within half the top: wiki/tasks.md
            self._setting = f"algo.agent.normalized_v_max={agent.normalized_v_max:g}"
            self._fix = (
                f"algo.agent.normalized_v_max={1.5 * agent.normalized_v_max:g} (see train/reward_scale; "
                'wiki/tasks.md, "Value supports with reward normalisation")'
            )
        else:
            self._setting = f"algo.agent.v_max={agent.v_max:g}"
            wider = agent.v_max + (agent.v_max - agent.v_min) / 2
            self._fix = (
                f"algo.agent.v_max={wider:g}, or algo.agent.reward_normalization=true "
                '(wiki/tasks.md, "C51 supports")'
            )
        self._streak = 0
        self._since: int | None = None
        self.warned = False
        """Whether the warning was given (once per launch: a resumed run may warn again)."""

    def report(self, snapshot: Snapshot) -> None:
        """Count a fresh ``train/qf_max`` at the top; warn at the ``SATURATED_REPORTS``-th in a row."""
        value = snapshot.scalars.get(QF_MAX)
        if self.warned or value is None or QF_MAX in snapshot.stale:
            return
        if not math.isfinite(value) or value < self._top - self._margin:  # NaN says nothing of the top
            self._streak, self._since = 0, None
            return
        self._streak += 1
        if self._since is None:
            self._since = snapshot.iteration
        if self._streak >= SATURATED_REPORTS:
            self.warned = True
            _log.warning(
                "the critics' values sit at the top of their support: train/qf_max %.4g with %s, %d reports "
                "in a row since iteration %d. Targets above it may be clipped, so that the critics cannot "
                "rank the best actions and learning stalls; widen the support in a new run (a resume keeps "
                "the checkpoint's): %s",
                value, self._setting, self._streak, self._since, self._fix,
            )  # fmt: skip

    def evaluated(self, point: EvalPoint) -> None:
        """Evaluations say nothing of the support."""

    def checkpoint_saved(self, path: Path) -> None:
        """Checkpoints say nothing of the support."""

    def close(self) -> None:
        """Nothing to release."""
