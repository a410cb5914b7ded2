import multiprocessing.resource_tracker
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


# The package's tests also run on their own (outside this repository, against an installed wheel):
# they register their markers and skip `gpu` tests without a CUDA device themselves. Inside the
# repository the root conftest does the same; a marker registered and a test skipped twice is harmless.
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers these tests use."""
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests where torch sees no CUDA device (or torch is not installed)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device (run on the GPU machine)"))


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
