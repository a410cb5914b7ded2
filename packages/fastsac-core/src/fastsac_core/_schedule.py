"""When learning starts and how many updates are due: the one rule both trainers follow.

# Note [updates due]
``gstep`` counts full env batches collected so far (the synchronous trainer's iteration after its
step; the asynchronous learner's ``collector_steps // num_collectors``). The first
``learning_starts`` batches are collected with random actions; learning starts once they are in,
at ``gstep == learning_starts``, and from then on every batch collected owes ``num_updates``
updates (the update-to-data ratio), the batch at ``gstep == learning_starts`` included. gstep 0
(nothing collected) never owes anything, so ``learning_starts`` 0 and 1 both start at the first
batch. A trainer that cannot sample yet (its replay buffer holds no complete transition) keeps
what is due and runs it once it can: owed updates are never dropped.
"""

from __future__ import annotations

__all__ = ["learning_started", "updates_due"]


def learning_started(gstep: int, learning_starts: int) -> bool:
    """Whether learning has started once ``gstep`` full env batches are collected (Note [updates due]).

    Until it has, the collectors act at random.
    """
    return gstep >= learning_starts


def updates_due(gstep: int, *, paid_gstep: int, learning_starts: int, num_updates: int) -> int:
    """Updates owed for the batches after ``paid_gstep`` up to ``gstep`` (Note [updates due]).

    Args:
        gstep: Full env batches collected so far.
        paid_gstep: Batches already paid for (updates for them were counted before; a resumed run's
            gstep at its checkpoint).
        learning_starts: Batches of random actions before learning starts.
        num_updates: Updates owed per batch.

    Returns:
        ``num_updates`` for every batch in ``(paid_gstep, gstep]`` at or past ``learning_starts``
        (0 when there is none).
    """
    first = max(paid_gstep + 1, learning_starts, 1)
    return num_updates * max(gstep - first + 1, 0)
