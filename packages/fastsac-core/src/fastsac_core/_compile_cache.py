"""Where torch.compile keeps its on-disk caches: one per-user folder shared by every run.

# Note [compile cache]
# Inductor's FX-graph cache, AOT-autograd cache and compiled kernels (Triton on CUDA, C++ on CPU) live
# under ``TORCHINDUCTOR_CACHE_DIR``; torch's default is ``/tmp/torchinductor_<user>``, which a reboot,
# a container or a job scheduler's private /tmp empties, so every such run compiles from scratch. We
# point it at ``$XDG_CACHE_HOME/fastsac/torch-compile`` (``~/.cache/fastsac/torch-compile`` without
# XDG_CACHE_HOME), decided here and nowhere else:
#   * ``FASTSAC_COMPILE_CACHE=off``: no on-disk compile cache at all (torch's
#     ``force_disable_caches``), wherever it would be: every process compiles from scratch;
#   * ``TORCHINDUCTOR_CACHE_DIR`` set to a folder other than torch's default: kept as it is. Torch
#     writes its default into that variable itself when ``torch._dynamo`` is imported, so the default
#     cannot be told apart from unset and counts as unset;
#   * ``FASTSAC_COMPILE_CACHE=<folder>``: that folder;
#   * otherwise the per-user folder above.
# ``use_compile_cache`` applies the choice in the calling process, in ``os.environ``. Every code path
# of this package that builds a ``torch.compile`` function calls it first (the agent's steps and batch
# preparation, the inference policy), so every process that compiles -- the synchronous trainer, each
# spawned learner, a collector compiling its policy -- applies it before its first compile, and the
# trainer app's parent applies it at start, before it starts any worker. Every worker takes the
# parent's environment at its start (fastsac_async's Note [fork server]), so all of a run's processes
# make the same choice; inductor's compile worker
# processes, started at the first compile, inherit the variable too. Torch reads the folder at each
# cache access, so setting it after ``torch._dynamo`` is imported but before the first compile is in
# time (``test_compile_cache.py`` checks that a second process finds the first one's entries there).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CompileCache", "compile_cache", "use_compile_cache"]

log = logging.getLogger(__name__)

ENV_VAR = "FASTSAC_COMPILE_CACHE"
"""The user's setting: a folder, or ``off``."""
TORCH_ENV_VAR = "TORCHINDUCTOR_CACHE_DIR"
"""Torch's own setting, respected when set."""
_TORCH_OFF_VAR = "TORCHINDUCTOR_FORCE_DISABLE_CACHES"
_OFF = frozenset({"off", "0", "false", "no", "none"})

_applied: CompileCache | None = None


@dataclass(frozen=True, kw_only=True)
class CompileCache:
    """Where torch.compile's caches go (Note [compile cache])."""

    folder: Path | None
    """The cache folder; None when caching is off."""
    source: str
    """Why: ``TORCHINDUCTOR_CACHE_DIR``, ``FASTSAC_COMPILE_CACHE`` or ``default``."""

    def describe(self) -> str:
        """One line for the log."""
        if self.folder is None:
            return f"torch.compile caches are off ({ENV_VAR}=off): every process compiles from scratch"
        how = f"set {ENV_VAR}=<folder> to move it, {ENV_VAR}=off to disable it"
        if self.source == TORCH_ENV_VAR:
            how = f"{TORCH_ENV_VAR} was set; unset it to use {ENV_VAR}"
        return f"torch.compile caches in {self.folder} (from {self.source}; {how})"


def compile_cache(environ: Mapping[str, str] | None = None) -> CompileCache:
    """The compile cache that ``environ`` (default: ``os.environ``) asks for; changes nothing."""
    env = os.environ if environ is None else environ
    setting = env.get(ENV_VAR, "").strip()
    ours: CompileCache
    if setting.lower() in _OFF:
        ours = CompileCache(folder=None, source=ENV_VAR)
    elif setting:
        ours = CompileCache(folder=Path(setting).expanduser().absolute(), source=ENV_VAR)
    else:
        base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
        ours = CompileCache(folder=base / "fastsac" / "torch-compile", source="default")
    given = env.get(TORCH_ENV_VAR)
    if ours.folder is not None and given and Path(given) not in (_torch_default(), ours.folder):
        return CompileCache(folder=Path(given), source=TORCH_ENV_VAR)
    return ours


def _torch_default() -> Path:
    """Torch's own folder, which it writes into ``TORCHINDUCTOR_CACHE_DIR`` when dynamo loads."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(os.path.abspath(default_cache_dir()))


def use_compile_cache() -> CompileCache:
    """Apply ``compile_cache()`` in this process before its first compile, and log it (once per process).

    Idempotent: later calls return the first call's choice (torch keeps the folder of its first compile).
    """
    global _applied
    if _applied is not None:
        return _applied
    chosen = compile_cache()
    if chosen.folder is None:
        import torch.compiler.config

        torch.compiler.config.force_disable_caches = True
        os.environ[_TORCH_OFF_VAR] = "1"  # for the processes this one starts
    else:
        os.environ[TORCH_ENV_VAR] = str(chosen.folder)
    _applied = chosen
    log.info("%s", chosen.describe())
    return chosen
