"""torch.compile's caches live in one per-user folder shared by runs (Note [compile cache])."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastsac_core._compile_cache import compile_cache

# A process that compiles the inference policy's forward through the library's path, with dynamo
# imported first (which makes torch write its own default folder into TORCHINDUCTOR_CACHE_DIR).
_COMPILE = """
import json, os
import torch._dynamo
from torch._dynamo.utils import counters
import torch
from fastsac_core import InferencePolicy
from fastsac_core.testing import TINY_SHARED_DIMS, tiny_config
torch.set_num_threads(1)
policy = InferencePolicy(TINY_SHARED_DIMS, tiny_config(), compile=True, deterministic=True)
policy(torch.zeros(4, TINY_SHARED_DIMS.obs_dim))
print(json.dumps({"dir": os.environ["TORCHINDUCTOR_CACHE_DIR"], **counters["inductor"]}))
"""

_APPLY = """
import json, os
import torch.compiler.config
from fastsac_core import use_compile_cache
use_compile_cache()
flag = torch.compiler.config.force_disable_caches
print(json.dumps([flag, os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")]))
"""


def _run(script: str, **env: str) -> dict[str, object]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "FASTSAC_COMPILE_CACHE")
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_a_second_process_compiling_the_same_step_hits_the_first_ones_cache(tmp_path: Path) -> None:
    """Process 1 misses and fills $XDG_CACHE_HOME/fastsac/torch-compile; process 2 hits it there.

    Two interpreters, one C++ compile. Both leave out inductor's SIMD probes and vectorised kernels
    (TORCHINDUCTOR_VEC_ISA_OK=0): half the g++ time, and the same cache path.
    """
    folder = tmp_path / "xdg" / "fastsac" / "torch-compile"
    scalar = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "TORCHINDUCTOR_VEC_ISA_OK": "0"}
    first = _run(_COMPILE, **scalar)
    assert first["dir"] == str(folder)
    assert first.get("fxgraph_cache_miss", 0) >= 1 and first.get("fxgraph_cache_hit", 0) == 0, first
    assert any((folder / "fxgraph").rglob("*")), "the first process wrote no FX graph entry"
    second = _run(_COMPILE, **scalar)
    assert second.get("fxgraph_cache_hit", 0) >= 1 and second.get("fxgraph_cache_miss", 0) == 0, second


def test_off_disables_torch_caches_here_and_in_the_processes_it_starts() -> None:
    """FASTSAC_COMPILE_CACHE=off beside a folder: torch's caches off here and in the env children inherit."""
    done = subprocess.run(
        [sys.executable, "-c", _APPLY],
        env={**os.environ, "FASTSAC_COMPILE_CACHE": "off", "TORCHINDUCTOR_CACHE_DIR": "/tmp/elsewhere"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, "1"]


def _default() -> str:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.abspath(default_cache_dir())


@pytest.mark.parametrize(
    ("environ", "folder", "source"),
    [
        ({"XDG_CACHE_HOME": "/x"}, "/x/fastsac/torch-compile", "default"),
        ({}, str(Path.home() / ".cache/fastsac/torch-compile"), "default"),
        ({"FASTSAC_COMPILE_CACHE": "/y/cc", "XDG_CACHE_HOME": "/x"}, "/y/cc", "FASTSAC_COMPILE_CACHE"),
        ({"FASTSAC_COMPILE_CACHE": "OFF"}, None, "FASTSAC_COMPILE_CACHE"),
        ({"FASTSAC_COMPILE_CACHE": "off", "TORCHINDUCTOR_CACHE_DIR": "/t"}, None, "FASTSAC_COMPILE_CACHE"),
        ({"TORCHINDUCTOR_CACHE_DIR": "/t", "FASTSAC_COMPILE_CACHE": "/y"}, "/t", "TORCHINDUCTOR_CACHE_DIR"),
        # torch writes its default there itself (dynamo's import): that counts as unset
        ({"TORCHINDUCTOR_CACHE_DIR": "<torch default>", "XDG_CACHE_HOME": "/x"}, "/x/fastsac/torch-compile",
         "default"),
        # a child of a parent that applied the default: the same choice, the same words in its log
        ({"TORCHINDUCTOR_CACHE_DIR": "/x/fastsac/torch-compile", "XDG_CACHE_HOME": "/x"},
         "/x/fastsac/torch-compile", "default"),
    ],
)  # fmt: skip
def test_the_folder_follows_the_documented_precedence(
    environ: dict[str, str], folder: str | None, source: str
) -> None:
    """Precedence: off, TORCHINDUCTOR_CACHE_DIR (not torch default), a FASTSAC folder, XDG, ~/.cache."""
    environ = {k: (_default() if v == "<torch default>" else v) for k, v in environ.items()}
    chosen = compile_cache(environ)
    assert (str(chosen.folder) if chosen.folder else None, chosen.source) == (folder, source)
