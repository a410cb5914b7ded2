import multiprocessing.resource_tracker
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Spawned children import their targets from `shmtx_workers`, so this directory must be importable
# in them too (spawn passes the parent's sys.path to the child).
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True, scope="session")
def _resource_tracker_running() -> Iterator[None]:
    """Start multiprocessing's resource tracker before any test's leak snapshot.

    The first spawned process (or spawn-context semaphore) starts it as a long-lived child of the
    test process; started inside a test, the root conftest would report it as a leaked child.
    """
    multiprocessing.resource_tracker.ensure_running()
    yield
