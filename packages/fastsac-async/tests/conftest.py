"""Start multiprocessing's resource tracker once per session, before the per-test leak guard.

The tracker is a long-lived helper process that the first spawn starts; started here, it belongs
to the session and is not mistaken for a child leaked by a test.
"""

from __future__ import annotations

import multiprocessing.resource_tracker

import pytest


@pytest.fixture(autouse=True, scope="session")
def _resource_tracker_first() -> None:
    multiprocessing.resource_tracker.ensure_running()
