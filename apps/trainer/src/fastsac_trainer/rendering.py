"""Which OpenGL MuJoCo renders offscreen with: ``MUJOCO_GL``, chosen before anything renders.

MuJoCo reads ``MUJOCO_GL`` when it is imported (its ``GLContext``; :func:`match_mujoco_gl` catches it up
when the choice came later) and gymnasium when it makes a renderer. The choice is made by trying each
backend in a short child process: EGL (GPU hosts: the NVIDIA driver's ``libEGL``; without a GPU:
Mesa's, ``libegl1`` + ``libegl-mesa0`` on Debian/Ubuntu, ``mesa-libEGL`` on Fedora), then OSMesa
(``libosmesa6`` on Debian/Ubuntu, ``mesa-libOSMesa`` on Fedora). A ``MUJOCO_GL`` set by the user is
kept. When none works, one line says what each attempt said and what to install.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["BACKENDS", "RenderingError", "match_mujoco_gl", "mujoco_import_is_fork_safe", "select_gl"]

BACKENDS = ("egl", "osmesa")
"""Offscreen backends tried, in order."""
_PROBE = "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"
_PROBE_TIMEOUT_S = 60


_FORK_SAFE_GL = (
    "",
    "glfw",
    "enable",
    "enabled",
    "on",
    "true",
    "1",
    "disable",
    "disabled",
    "off",
    "false",
    "0",
)
"""``MUJOCO_GL`` values under which ``import mujoco`` loads no OpenGL library: GLFW's bindings (loaded,
not initialised: no window, no GL until one is made) or nothing."""


def mujoco_import_is_fork_safe(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a process may ``import mujoco`` under ``environ`` and then fork workers.

    True for the ``MUJOCO_GL`` values that load no OpenGL library at import (unset: MuJoCo's GLFW
    default; or disabled). EGL and OSMesa load theirs, and a value MuJoCo refuses raises: False then,
    so the workers' fork server (``fastsac_trainer.training.start_workers_first``) imports no MuJoCo.
    """
    return environ.get("MUJOCO_GL", "").strip().lower() in _FORK_SAFE_GL


def match_mujoco_gl() -> None:
    """Point ``mujoco.GLContext`` at this process's ``MUJOCO_GL`` if MuJoCo was imported under another.

    ``import mujoco`` picks its GL context class once, from ``MUJOCO_GL`` at that moment; a worker
    forked from a server that imported MuJoCo before :func:`select_gl` chose a backend (or a process
    that imported it first) would keep GLFW's, and an env rendering through ``mujoco.Renderer`` would
    need a display. Gymnasium's own renderer reads ``MUJOCO_GL`` when it is made and needs none of this.
    Call it before making an env that renders.
    """
    import importlib

    gl_context = sys.modules.get("mujoco.rendering.classic.gl_context")
    wanted = os.environ.get("MUJOCO_GL", "").strip().lower()
    if gl_context is None or getattr(gl_context, "_MUJOCO_GL", wanted) == wanted:
        return
    gl_context = importlib.reload(gl_context)  # reads MUJOCO_GL again; mujoco.Renderer looks it up per call
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None and hasattr(gl_context, "GLContext"):
        mujoco.GLContext = gl_context.GLContext  # type: ignore[attr-defined]


class RenderingError(TrainerAppError):
    """No offscreen OpenGL backend works for MuJoCo on this machine."""


def _gl_env(backend: str) -> dict[str, str]:
    return {"MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}


def _probe(backend: str) -> str | None:
    """None when ``backend`` renders in a child process, else the last line it printed."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=dict(os.environ, **_gl_env(backend)),
            capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"no answer in {_PROBE_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"


def select_gl(setting: str = "video=true", off: str | None = None) -> str:
    """Set ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) to the first backend that works; its name.

    Call it before anything renders (gymnasium reads ``MUJOCO_GL`` when it makes its renderer); the
    run's workers get the choice with the parent's environment, and an env is made to render after
    :func:`match_mujoco_gl` (MuJoCo may have been imported before the choice: in the parent, or in the
    workers' fork server). A ``MUJOCO_GL`` already set is kept as it is.

    Args:
        setting: What asked for rendering, as the error names it (``video=true``).
        off: How to do without rendering, added to the error's fixes.

    Raises:
        RenderingError: Neither EGL nor OSMesa renders here.
    """
    if os.environ.get("MUJOCO_GL"):
        return os.environ["MUJOCO_GL"]
    failures = []
    for backend in BACKENDS:
        failure = _probe(backend)
        if failure is None:
            os.environ.update(_gl_env(backend))
            return backend
        failures.append(f"{backend}: {failure}")
    raise RenderingError(
        f"{setting} is invalid here: MuJoCo has no offscreen OpenGL ({'; '.join(failures)}); install EGL "
        "(libegl1 libegl-mesa0 on Debian/Ubuntu; the NVIDIA driver's on GPU hosts) or OSMesa (libosmesa6), "
        f"or set MUJOCO_GL{'' if off is None else f', or {off}'}"
    )
