"""How many updates a learner runs (``maybe_train``), decided in lockstep across ranks.

# Note [training decision]
``gstep = collector_steps // num_collectors`` counts full env batches collected so far. When
learning starts and what each batch owes is ``fastsac_core.updates_due`` (Note [updates due] in
``fastsac_core._schedule``), the rule the synchronous trainer follows too: nothing before
``gstep == learning_starts``, then ``num_updates`` per batch. ``strict`` owes exactly that;
``learner_bound`` owes ``num_updates`` whenever anything is due at all, however many batches came.
Owed updates are kept while they cannot run (an empty replay buffer on any rank): samples are
never dropped and the debt is never forgotten.

Lockstep: every rank calls :meth:`TrainDecider.step` once per loop. It performs ONE small all-reduce
of ``[new_updates (rank 0 only), stop votes, done votes, ranks without data, gstep]``, so rank 0
decides the count, every rank learns it, the run defers together while any rank still waits for
data (each keeps draining meanwhile), and the stop is collective (any stop vote, or every rank
done): no rank is ever left alone inside a collective.

# Note [strict back-pressure]
One decision grants at most ``max_run`` updates (the rest stays owed), so a learner returns to its
loop (stats, checkpoints, stop votes) at a steady cadence however far behind it is. In ``strict``
mode a learner also stops draining its rings while more than ``max_run`` updates are owed
(:meth:`TrainDecider.should_ingest`): the rings fill, the collectors wait for room (a full ring,
or their lead: Note [strict lead] in ``fastsac_async.collector.loop``), and the update-to-data ratio
holds. Without that, collectors faster than the learner were never blocked,
the debt grew without bound and was paid in ever longer bursts (seen on the H200 headline run).
``learner_bound`` never throttles collectors: that is its point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastsac_async.exceptions import AsyncConfigError
from fastsac_async.learner.collective import Collective
from fastsac_core import learning_started, updates_due

__all__ = ["Decision", "PublishCadence", "TrainDecider", "split_chunks"]


@dataclass(frozen=True)
class Decision:
    """What every rank does after one lockstep decision."""

    run_updates: int
    """Updates to run now (0 while deferred or gated)."""
    owed: int
    """Updates still owed after this decision (deferred ones included)."""
    stop: bool
    """Every rank stops after running ``run_updates``."""
    gstep: int
    """Rank 0's gstep behind this decision."""


class TrainDecider:
    """The ``maybe_train`` decision of one learner rank (see Note [training decision]).

    The counts come from records that checked themselves (``AsyncOptions``, ``FastSACConfig``).

    Args:
        collective: The ranks' collective (``SoloCollective`` for one learner).
        num_collectors: Collectors of the whole run.
        num_updates: Updates per gstep (``algo.agent.num_updates``).
        learning_starts: Full batches of random actions before learning starts.
        utd_mode: ``strict`` or ``learner_bound``.
        start_gstep: gstep already counted (a resumed run owes nothing new for earlier batches).
        start_owed: Updates a resumed run still owed at its checkpoint (``owed_updates``; Note [a stop
            keeps what was counted] in ``fastsac_async.learner.loop``): owed again from the start.
        max_run: Most updates one decision grants (None: all that is owed); see
            Note [strict back-pressure].
    """

    def __init__(
        self,
        collective: Collective,
        *,
        num_collectors: int,
        num_updates: int,
        learning_starts: int,
        utd_mode: Literal["strict", "learner_bound"],
        start_gstep: int = 0,
        start_owed: int = 0,
        max_run: int | None = None,
    ) -> None:
        if utd_mode not in ("strict", "learner_bound"):
            raise AsyncConfigError(
                f"async_options.utd_mode={utd_mode!r} is not a mode; use 'strict' or 'learner_bound'"
            )
        self._collective = collective
        self._num_collectors = num_collectors
        self._num_updates = num_updates
        self._learning_starts = learning_starts
        self._mode = utd_mode
        # gsteps up to and including _last_gstep are paid for.
        self._last_gstep = start_gstep
        if start_owed < 0:
            raise AsyncConfigError(f"start_owed={start_owed} must be 0 or more (a checkpoint's owed_updates)")
        self._owed = start_owed
        if max_run is not None and max_run < 1:
            raise AsyncConfigError(f"max_run={max_run} must be at least 1 (or None for no cap)")
        self._max_run = max_run

    @property
    def owed(self) -> int:
        """Updates owed and not yet run."""
        return self._owed

    def should_ingest(self, has_data: bool) -> bool:
        """Whether a learner may drain its rings now (Note [strict back-pressure]).

        Always while its buffer has nothing to sample (a rank waiting for data must keep draining).
        """
        if self._mode != "strict" or self._max_run is None or not has_data:
            return True
        return self._owed <= self._max_run

    def learning(self, collector_steps: int) -> bool:
        """True once learning has started for these collector steps."""
        return learning_started(collector_steps // self._num_collectors, self._learning_starts)

    def new_updates(self, collector_steps: int) -> tuple[int, int]:
        """Rank 0's count of newly owed updates for ``collector_steps`` (and the gstep); advances state."""
        gstep = collector_steps // self._num_collectors
        due = updates_due(
            gstep,
            paid_gstep=self._last_gstep,
            learning_starts=self._learning_starts,
            num_updates=self._num_updates,
        )
        if due == 0:
            return 0, gstep
        self._last_gstep = gstep
        return (due if self._mode == "strict" else self._num_updates), gstep

    def step(
        self, *, collector_steps: int, has_data: bool, stop_vote: bool, done_vote: bool = False
    ) -> Decision:
        """One lockstep decision; every rank calls it once per loop.

        Args:
            collector_steps: Sum of the collectors' step counters as this rank reads them (only
                rank 0's reading is used).
            has_data: This rank's replay buffer can be sampled.
            stop_vote: This rank saw a stop request; any rank's vote stops every rank.
            done_vote: This rank has nothing left to do (its collectors finished and everything
                is ingested); the run stops once every rank votes done.

        Returns:
            The decision, identical on every rank.
        """
        new, gstep = self.new_updates(collector_steps) if self._collective.rank == 0 else (0, 0)
        total_new, stops, dones, not_ready, gsteps = self._collective.all_reduce_sum(
            [new, int(stop_vote), int(done_vote), int(not has_data), gstep]
        )
        self._owed += total_new
        run = self._owed if not_ready == 0 else 0
        if self._max_run is not None:
            run = min(run, self._max_run)
        self._owed -= run
        # Done means nothing left to run: updates granted now, or still owed under max_run, come first.
        stop = stops > 0 or (dones == self._collective.world_size and self._owed == 0)
        return Decision(run_updates=run, owed=self._owed, stop=stop, gstep=gsteps)


def split_chunks(updates: int, chunk: int) -> list[int]:
    """``updates`` as consecutive chunks of at most ``chunk`` (``split_chunks(10, 4) == [4, 4, 2]``)."""
    if chunk < 1:
        raise AsyncConfigError(f"update chunk size must be at least 1, got {chunk}")
    full, rest = divmod(updates, chunk)
    return [chunk] * full + ([rest] if rest else [])


class PublishCadence:
    """Publish weights every ``interval`` updates, judged after each update chunk.

    Args:
        interval: ``async_options.weight_publish_interval``.
    """

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise AsyncConfigError(
                f"async_options.weight_publish_interval={interval} must be at least 1; "
                "use 1 to publish after every update"
            )
        self._interval = interval
        self._updates = 0
        self._published_at = 0

    @property
    def updates(self) -> int:
        """Updates counted so far."""
        return self._updates

    def after(self, updates: int) -> bool:
        """Count ``updates`` just run; True when a publish is due."""
        self._updates += updates
        if self._updates // self._interval > self._published_at // self._interval:
            self._published_at = self._updates
            return True
        return False
