"""When learning starts and how many updates are due (Note [updates due])."""

from __future__ import annotations

import pytest

from fastsac_core import learning_started, updates_due


@pytest.mark.parametrize("learning_starts", [0, 1, 2, 5])
def test_updates_are_due_from_the_batch_that_completes_learning_starts(learning_starts: int) -> None:
    """Batch by batch, num_updates are due from gstep == max(learning_starts, 1) on, none before."""
    per_batch = [
        updates_due(g, paid_gstep=g - 1, learning_starts=learning_starts, num_updates=3) for g in range(0, 9)
    ]
    first = max(learning_starts, 1)
    assert per_batch == [0 if g < first else 3 for g in range(0, 9)]
    started = [learning_started(g, learning_starts) for g in range(0, 9)]
    assert started == [g >= learning_starts for g in range(9)]


def test_a_jump_owes_every_batch_it_skipped_and_nothing_already_paid() -> None:
    """Each gstep in (paid, gstep] at or past learning_starts owes num_updates; a paid one owes nothing."""
    assert updates_due(10, paid_gstep=0, learning_starts=3, num_updates=4) == 4 * 8
    assert updates_due(10, paid_gstep=6, learning_starts=3, num_updates=4) == 4 * 4
    assert updates_due(10, paid_gstep=10, learning_starts=3, num_updates=4) == 0
    assert updates_due(2, paid_gstep=0, learning_starts=3, num_updates=4) == 0
