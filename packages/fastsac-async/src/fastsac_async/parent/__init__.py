"""The parent's side of a run.

:mod:`.engine` (allocate, spawn, shut down), :mod:`.monitor` (boot barrier, monitor loop, naming a
failed worker), :mod:`.supervisor` (worker processes), :mod:`.fork_server` (the workers' fork
server, importable without torch) and :mod:`.janitor` (what a killed parent leaves behind).
"""
