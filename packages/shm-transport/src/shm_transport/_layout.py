"""Slot layouts: which fields a transition slot holds, their per-env shapes and dtypes.

# Note [Slot byte layout]

A host ring segment stores its fields *field-major*: after the header, field ``f`` occupies one
contiguous region shaped ``(capacity, num_envs, *shape_f)`` in ``dtype_f``, and every region starts
on a 64-byte boundary (``ALIGN``). A run of ``k`` consecutive slots of one field is therefore a single
contiguous block, so ``read_span`` hands out ``(k, num_envs, *shape)`` views that copy out with one
memcpy per field. ``RingLayout.slot_nbytes`` is the payload of one slot (no padding);
``RingLayout.field_region_nbytes`` gives a field's padded region for ``capacity`` slots.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from shm_transport.exceptions import RingLayoutError

__all__ = ["ALIGN", "FieldSpec", "RingLayout", "align_up", "casts_safely", "describe"]

ALIGN = 64
"""Byte alignment of every field region (one x86-64 cache line)."""


def align_up(nbytes: int, alignment: int = ALIGN) -> int:
    """Round ``nbytes`` up to a multiple of ``alignment``."""
    return (nbytes + alignment - 1) // alignment * alignment


def casts_safely(source: torch.dtype, target: torch.dtype) -> bool:
    """Whether values of ``source`` may be stored as ``target`` without changing kind.

    The same dtype, or a cast within its kind or up to a higher one (bool -> integer -> float ->
    complex, ``torch.can_cast``). A float stored as an
    integer (``2.7`` -> ``2``, ``-1.0`` -> ``255`` in uint8, the debug sentinel) or a complex stored as a
    real number would lose more than precision, so the transport refuses it instead of casting silently.
    """
    return source == target or torch.can_cast(source, target)


def _dtype_and_shape(dtype: torch.dtype, shape: tuple[int, ...]) -> str:
    return f"{str(dtype).removeprefix('torch.')} {tuple(shape)}"


def describe(value: object) -> str:
    """A value as an error message shows it: a tensor's dtype and shape, else its type."""
    if isinstance(value, Tensor):
        return _dtype_and_shape(value.dtype, tuple(value.shape))
    return type(value).__name__


@dataclass(frozen=True)
class FieldSpec:
    """The per-env shape and dtype of one field of a slot."""

    shape: tuple[int, ...]
    """Shape of the field for one env (``()`` for a scalar per env)."""
    dtype: torch.dtype
    """Element dtype stored in the ring."""

    def __post_init__(self) -> None:
        if any(int(d) < 0 for d in self.shape):
            raise RingLayoutError(f"FieldSpec.shape={self.shape} has a negative dimension; use sizes >= 0")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if not isinstance(self.dtype, torch.dtype):
            raise RingLayoutError(
                f"FieldSpec.dtype={self.dtype!r} is not a torch.dtype; pass e.g. torch.float32"
            )

    @property
    def numel(self) -> int:
        """Elements of this field for one env."""
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return torch.empty((), dtype=self.dtype).element_size()

    def sentinel(self) -> float | int | bool:
        """The value that marks an unwritten element in debug mode (NaN, -1, or the unsigned max)."""
        if self.dtype.is_floating_point or self.dtype.is_complex:
            return math.nan
        if self.dtype == torch.bool:
            return True
        if self.dtype.is_signed:
            return -1
        return int(torch.iinfo(self.dtype).max)


@dataclass(frozen=True)
class RingLayout:
    """An ordered, frozen list of named fields plus the number of envs in one slot."""

    num_envs: int
    """Envs per slot (the leading per-slot dimension of every field)."""
    fields: tuple[tuple[str, FieldSpec], ...]
    """``(name, spec)`` pairs, in storage order."""

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise RingLayoutError(f"RingLayout.num_envs={self.num_envs} must be >= 1")
        names = [name for name, _ in self.fields]
        if not names:
            raise RingLayoutError("RingLayout.fields is empty; give at least one (name, FieldSpec)")
        if len(set(names)) != len(names):
            raise RingLayoutError(f"RingLayout.fields has duplicate names: {names}")

    @classmethod
    def of(cls, num_envs: int, fields: Mapping[str, tuple[tuple[int, ...], torch.dtype]]) -> RingLayout:
        """Build a layout from ``{"name": (shape, dtype), ...}`` (insertion order is storage order)."""
        specs = []
        for name, entry in fields.items():
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple | list)):
                raise RingLayoutError(
                    f"RingLayout.of got {name!r}: {entry!r}; give each field as (shape, dtype), "
                    "e.g. 'obs': ((3,), torch.float32) or 'reward': ((), torch.float32)"
                )
            specs.append((name, FieldSpec(tuple(entry[0]), entry[1])))
        return cls(num_envs, tuple(specs))

    @property
    def names(self) -> tuple[str, ...]:
        """Field names in storage order."""
        return tuple(name for name, _ in self.fields)

    @functools.cached_property
    def _slot_fields(self) -> tuple[tuple[str, torch.Size, torch.dtype], ...]:
        """``(name, (num_envs, *shape), dtype)`` of each field: what a pushed tensor is compared with."""
        return tuple(
            (name, torch.Size((self.num_envs, *spec.shape)), spec.dtype) for name, spec in self.fields
        )

    def check_push(self, fields: Mapping[str, object]) -> None:
        """Raise unless ``fields`` is one slot of this layout.

        That is exactly its fields, each a tensor shaped ``(num_envs, *shape)`` whose dtype casts
        safely to the field's (``casts_safely``).

        Raises:
            RingLayoutError: what was given against what the layout needs (a ring publishes nothing then).
        """
        if len(fields) == len(self.fields):
            for name, shape, dtype in self._slot_fields:
                src = fields.get(name)
                if not (isinstance(src, Tensor) and src.shape == shape and casts_safely(src.dtype, dtype)):
                    break
            else:
                return
        seen = {name: describe(value) for name, value in fields.items()}
        needed = {
            name: _dtype_and_shape(spec.dtype, (self.num_envs, *spec.shape)) for name, spec in self.fields
        }
        raise RingLayoutError(
            f"push got fields {seen}, the ring's layout needs exactly {needed}: tensors shaped "
            "(num_envs, *shape) of a dtype that casts to the field's without changing kind "
            "(no float into an integer field: convert or round it first)"
        )

    def spec(self, name: str) -> FieldSpec:
        """The spec of field ``name``."""
        for field_name, spec in self.fields:
            if field_name == name:
                return spec
        raise RingLayoutError(f"field {name!r} is not in the layout; fields are {self.names}")

    def field_nbytes(self, name: str) -> int:
        """Bytes of field ``name`` in one slot (all envs)."""
        spec = self.spec(name)
        return self.num_envs * spec.numel * spec.itemsize

    @property
    def slot_nbytes(self) -> int:
        """Payload bytes of one slot, all fields, no padding."""
        return sum(self.field_nbytes(name) for name in self.names)

    def field_region_nbytes(self, name: str, capacity: int) -> int:
        """Bytes of the 64-byte-aligned region that holds ``capacity`` slots of field ``name``."""
        return align_up(capacity * self.field_nbytes(name))

    @property
    def total_features(self) -> int:
        """Per-env width when every field is flattened and packed side by side (the CUDA-IPC slot)."""
        return sum(spec.numel for _, spec in self.fields)

    def fingerprint(self) -> int:
        """A stable 62-bit hash of the layout, stored in segment headers to catch mismatched attaches."""
        text = repr((self.num_envs, [(name, spec.shape, str(spec.dtype)) for name, spec in self.fields]))
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 2
