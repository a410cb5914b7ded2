import pickle

import pytest
import torch

from shm_transport import FieldSpec, RingLayout
from shm_transport.exceptions import RingLayoutError


def test_slot_bytes_and_packed_width_of_mixed_dtypes() -> None:
    """A slot's payload counts every field's bytes for every env; the packed width counts elements."""
    layout = RingLayout.of(8, {"v": ((17,), torch.float32), "s": ((), torch.float32), "f": ((), torch.uint8)})
    assert layout.spec("v") == FieldSpec((17,), torch.float32) and layout.spec("f").dtype == torch.uint8
    assert layout.slot_nbytes == 8 * ((17 + 1) * 4 + 1)
    assert layout.total_features == 17 + 1 + 1


def test_of_keeps_order_and_region_alignment() -> None:
    """RingLayout.of keeps insertion order and pads every field region to 64 bytes."""
    layout = RingLayout.of(3, {"b": ((2, 2), torch.float64), "a": ((), torch.int8)})
    assert layout.names == ("b", "a")
    assert layout.field_nbytes("a") == 3
    assert layout.field_region_nbytes("a", capacity=5) == 64


def test_fingerprint_changes_with_layout_and_survives_pickle() -> None:
    """The fingerprint is stable across pickling and differs for a different layout."""

    def build(width: int) -> RingLayout:
        return RingLayout.of(4, {"obs": ((3,), torch.float32), "actions": ((width,), torch.float32)})

    layout = build(2)
    again = pickle.loads(pickle.dumps(layout))
    assert again == layout and again.fingerprint() == layout.fingerprint()
    assert build(1).fingerprint() != layout.fingerprint()


@pytest.mark.parametrize(
    "build",
    [
        lambda: RingLayout(0, (("x", FieldSpec((1,), torch.float32)),)),
        lambda: RingLayout(1, ()),
        lambda: RingLayout(1, (("x", FieldSpec((1,), torch.float32)), ("x", FieldSpec((1,), torch.int8)))),
        lambda: FieldSpec((-1,), torch.float32),
        lambda: RingLayout.of(4, {"obs": (3, torch.float32)}),  # type: ignore[dict-item]
        lambda: RingLayout.of(4, {"obs": torch.float32}),  # type: ignore[dict-item]
    ],
)
def test_invalid_layouts_are_rejected(build: object) -> None:
    """Zero envs, no fields, duplicate names, negative sizes, a field not (shape, dtype): RingLayoutError."""
    with pytest.raises(RingLayoutError):
        build()  # type: ignore[operator]


def test_sentinels_per_dtype() -> None:
    """Sentinels are NaN for floats, -1 for signed ints and the max for unsigned ints."""
    assert FieldSpec((), torch.float32).sentinel() != FieldSpec((), torch.float32).sentinel()  # NaN
    assert FieldSpec((), torch.int64).sentinel() == -1
    assert FieldSpec((), torch.uint8).sentinel() == 255
