import pickle

import pytest
import torch

from shm_transport import FieldSpec, RingLayout, RingLayoutError, transition_layout


def test_transition_layout_fields_and_dtypes() -> None:
    """The trainer layout has the six fields in order, float32 data and uint8 flags."""
    layout = transition_layout(8, obs_dim=17, critic_obs_dim=20, act_dim=6)
    assert layout.names == ("obs", "critic_obs", "actions", "rewards", "dones", "truncations")
    assert layout.spec("obs") == FieldSpec((17,), torch.float32)
    assert layout.spec("dones").dtype == torch.uint8
    assert layout.slot_nbytes == 8 * ((17 + 20 + 6 + 1) * 4 + 2)
    assert layout.total_features == 17 + 20 + 6 + 3


def test_transition_layout_without_a_critic_observation() -> None:
    """critic_obs_dim=None leaves critic_obs out: five fields, a slot without its bytes."""
    layout = transition_layout(8, obs_dim=17, critic_obs_dim=None, act_dim=6)
    assert layout.names == ("obs", "actions", "rewards", "dones", "truncations")
    assert layout.total_features == 17 + 6 + 3


def test_of_keeps_order_and_region_alignment() -> None:
    """RingLayout.of keeps insertion order and pads every field region to 64 bytes."""
    layout = RingLayout.of(3, {"b": ((2, 2), torch.float64), "a": ((), torch.int8)})
    assert layout.names == ("b", "a")
    assert layout.field_nbytes("a") == 3
    assert layout.field_region_nbytes("a", capacity=5) == 64


def test_fingerprint_changes_with_layout_and_survives_pickle() -> None:
    """The fingerprint is stable across pickling and differs for a different layout."""
    layout = transition_layout(4, 3, 3, 2)
    again = pickle.loads(pickle.dumps(layout))
    assert again == layout and again.fingerprint() == layout.fingerprint()
    assert transition_layout(4, 3, 3, 1).fingerprint() != layout.fingerprint()


@pytest.mark.parametrize(
    "build",
    [
        lambda: RingLayout(0, (("x", FieldSpec((1,), torch.float32)),)),
        lambda: RingLayout(1, ()),
        lambda: RingLayout(1, (("x", FieldSpec((1,), torch.float32)), ("x", FieldSpec((1,), torch.int8)))),
        lambda: FieldSpec((-1,), torch.float32),
    ],
)
def test_invalid_layouts_are_rejected(build: object) -> None:
    """Zero envs, no fields, duplicate names and negative sizes raise RingLayoutError."""
    with pytest.raises(RingLayoutError):
        build()  # type: ignore[operator]


def test_sentinels_per_dtype() -> None:
    """Sentinels are NaN for floats, -1 for signed ints and the max for unsigned ints."""
    assert FieldSpec((), torch.float32).sentinel() != FieldSpec((), torch.float32).sentinel()  # NaN
    assert FieldSpec((), torch.int64).sentinel() == -1
    assert FieldSpec((), torch.uint8).sentinel() == 255
