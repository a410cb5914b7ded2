"""The transition ring layout: fastsac-core's transition fields as a shm-transport ``RingLayout``."""

import dataclasses

import torch

from fastsac_async.transport import ring_layout, weight_extras
from fastsac_core import EnvDims
from shm_transport import FieldSpec

DIMS = EnvDims(obs_dim=17, critic_obs_dim=20, act_dim=6, action_low=(-1.0,) * 6, action_high=(1.0,) * 6)


def test_ring_layout_fields_and_dtypes() -> None:
    """The trainer layout has the six fields in order, float32 data and uint8 flags."""
    layout = ring_layout(DIMS, 8)
    assert layout.names == ("obs", "critic_obs", "actions", "rewards", "terminated", "truncated")
    assert layout.spec("obs") == FieldSpec((17,), torch.float32)
    assert layout.spec("terminated").dtype == torch.uint8
    assert layout.slot_nbytes == 8 * ((17 + 20 + 6 + 1) * 4 + 2)
    assert layout.total_features == 17 + 20 + 6 + 3


def test_ring_layout_without_a_critic_observation() -> None:
    """A critic that observes obs leaves critic_obs out: five fields, a slot without its bytes."""
    shared = dataclasses.replace(DIMS, critic_obs_dim=17, critic_obs_is_obs=True)
    layout = ring_layout(shared, 8)
    assert layout.names == ("obs", "actions", "rewards", "terminated", "truncated")
    assert layout.total_features == 17 + 6 + 3


def test_weight_extras_are_the_policy_extras_shapes_and_the_publish_stamp() -> None:
    """The channel reserves the normalizer's float32 mean, std (obs_dim), count (1) and the int64 gstep."""
    assert weight_extras(DIMS) == {
        "obs_mean": FieldSpec((17,), torch.float32),
        "obs_std": FieldSpec((17,), torch.float32),
        "obs_count": FieldSpec((1,), torch.float32),
        "published_gstep": FieldSpec((1,), torch.int64),
    }
