import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> None:
    # Small CPU ops on a shared 2-core machine: extra OpenMP threads only spin against each other.
    torch.set_num_threads(1)
