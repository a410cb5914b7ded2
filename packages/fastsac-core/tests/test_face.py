"""The package's face: every exported name loads on first use, and importing the package loads no torch."""

from __future__ import annotations

import importlib
import subprocess
import sys

import fastsac_core


def test_every_exported_name_has_a_home_and_loads() -> None:
    """``__all__`` and the table of homes name the same things, and each name is its home module's."""
    assert set(fastsac_core._HOME_OF) == set(fastsac_core.__all__)
    for name in fastsac_core.__all__:
        home = importlib.import_module(fastsac_core._HOME_OF[name], "fastsac_core")
        assert getattr(fastsac_core, name) is getattr(home, name)


def test_the_config_and_errors_come_without_torch() -> None:
    """In a fresh interpreter, FastSACConfig, EnvDims and the errors load without importing torch."""
    script = (
        "import sys\n"
        "from fastsac_core import EnvDims, FastSACConfig, FastSACCoreError\n"
        "FastSACConfig()\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
