"""A learner rank: its loop and what the loop is made of.

:mod:`.loop` (the :class:`~fastsac_async.learner.loop.Learner` and ``run_learner_loop``), with the
profiler window beside it (:mod:`.profiler`); :mod:`.ingest` and :mod:`.assembler` (rings into the
replay buffer), :mod:`.decider` and :mod:`.collective` (the lockstep training decision),
:mod:`.publisher` (weights out), :mod:`.device_timing`, :mod:`.cpu_loan` (the first compile on lent
CPUs), and :mod:`.process` (the process entry point).
"""
