"""Which OpenGL MuJoCo renders offscreen with: ``MUJOCO_GL`` chosen before ``mujoco`` is imported.

MuJoCo reads ``MUJOCO_GL`` once, when it is imported, so the choice is made first, by trying each
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

__all__ = ["BACKENDS", "RenderingError", "gl_loaded_at_import", "select_gl"]

BACKENDS = ("egl", "osmesa")
"""Offscreen backends tried, in order."""
_PROBE = "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"
_PROBE_TIMEOUT_S = 60


def gl_loaded_at_import(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``import mujoco`` under ``environ`` loads an OpenGL library (EGL, OSMesa, GLX).

    ``MUJOCO_GL`` unset (MuJoCo's GLFW default: GLFW's bindings, no OpenGL until a window is made) or
    disabled loads none: such a process may import MuJoCo and fork (the workers' fork server:
    ``fastsac_trainer.training.start_workers_first``).
    """
    return environ.get("MUJOCO_GL", "").strip().lower() in ("egl", "osmesa", "glx")


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

    Call it before anything renders (gymnasium reads ``MUJOCO_GL`` when it makes its renderer), best
    before anything imports ``mujoco``; processes spawned afterwards inherit the choice. A
    ``MUJOCO_GL`` already set is kept as it is.

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
