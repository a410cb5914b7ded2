"""Names of a package that load from their modules on first use, so that ``--help`` imports no torch.

A package lists, per module, the names it exports (``homes``) and sets
``__getattr__, __dir__ = lazy_exports(__name__, homes)``; its ``__all__`` names the same names
(``test_first_hour.py`` checks both).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["home_of", "lazy_exports"]


def home_of(homes: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Exported name -> the module that defines it."""
    return {name: module for module, names in homes.items() for name in names}


def lazy_exports(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose exported names live in ``homes``' modules."""
    where = home_of(homes)
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's own hook
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later uses find it without this function
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*namespace, *where})

    return __getattr__, __dir__
