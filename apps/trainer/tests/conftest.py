"""Fixtures of the trainer app's tests: the user's batched env of ``wiki/tasks.md``, one torch thread."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastsac_trainer import evaluate

WIKI_TASKS = Path(__file__).resolve().parents[3] / "wiki" / "tasks.md"
EXAMPLE_MODULE = "point_env"


def wiki_example() -> str:
    """The complete batched-env example of ``wiki/tasks.md`` (its one python block that defines ``make``)."""
    blocks = re.findall(r"```python\n(.*?)```", WIKI_TASKS.read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if "\ndef make(" in b]
    assert len(found) == 1, "wiki/tasks.md must hold exactly one python block defining make()"
    return found[0]


@pytest.fixture(scope="module")
def point_env_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the workspace holding ``point_env.py``, the wiki's example, as written there."""
    folder = tmp_path_factory.mktemp("user_envs")
    (folder / f"{EXAMPLE_MODULE}.py").write_text(wiki_example(), encoding="utf-8")
    return folder


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for the test (extra threads only contend on a shared 2-core CPU), then as before.

    Opt in per module: ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``.
    """
    with evaluate.one_torch_thread():
        yield
