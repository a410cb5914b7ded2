"""Keep MuJoCo's model-compiler deprecation notice out of the console.

MuJoCo 4 prints ``WARNING: compiler attribute 'settotalmass' is deprecated ...`` to stderr
through its C warning handler whenever a v5 model that still uses the attribute (HalfCheetah)
is compiled. It is not a Python warning, so ``warnings.filterwarnings`` cannot catch it: the
filter below installs a MuJoCo user warning handler for the duration of env construction that
drops exactly that notice and forwards any other MuJoCo warning to ``logging``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import mujoco

__all__ = ["quiet_mujoco_compiler"]

_log = logging.getLogger(__name__)

_IGNORED = ("compiler attribute 'settotalmass' is deprecated",)


def _handler(message: str) -> None:
    if any(fragment in message for fragment in _IGNORED):
        _log.debug("mujoco (ignored): %s", message)
        return
    _log.warning("mujoco: %s", message)


@contextlib.contextmanager
def quiet_mujoco_compiler() -> Iterator[None]:
    """Drop MuJoCo's ``settotalmass`` deprecation notice while the block runs (restored after)."""
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(_handler)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)
