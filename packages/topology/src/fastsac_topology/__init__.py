"""topology: a pure resolver from counts, devices and the host layout to a placement plan.

No processes and no I/O: the host layout comes in as data (``numa_bind.HostLayout``).
"""

from fastsac_topology._counts import check_counts, format_choices
from fastsac_topology._devices import (
    CPU_POLICY_MAX_ENV_BYTES,
    check_learner_devices,
    expand_learner_devices,
    policy_fits_a_core,
)
from fastsac_topology._plan import CollectorPlacement, LearnerPlacement, TrainerTopology, Transport
from fastsac_topology._resolve import resolve_trainer_topology
from fastsac_topology._sizing import AUTO, CollectorSizing, size_collectors
from fastsac_topology._transport import IpcMode
from fastsac_topology.exceptions import TopologyError

__all__ = [  # noqa: RUF022 - grouped by topic
    # resolver and its count rules
    "IpcMode",
    "check_counts",
    "format_choices",
    "check_learner_devices",
    "expand_learner_devices",
    "resolve_trainer_topology",
    # where collectors infer under 'auto'
    "CPU_POLICY_MAX_ENV_BYTES",
    "policy_fits_a_core",
    # automatic collector sizing
    "AUTO",
    "CollectorSizing",
    "size_collectors",
    # plan
    "CollectorPlacement",
    "LearnerPlacement",
    "TrainerTopology",
    "Transport",
    # errors
    "TopologyError",
]
