"""The gpu-idle kind's policy section, `gpu_idle` (docs/policy.md): the kind's spec declares it
(`KindSpec.policy`), the code reads it with `domain.policy.section_of(policy, GpuIdlePolicy)`."""

from __future__ import annotations

from pydantic import Field

from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import PolicySection


class GpuIdlePolicy(Frozen):
    #: switch (domain/switches.py): off, gpu-idle notices are ignored and the stack creates no alarm
    enabled: bool = True
    threshold_percent: float = Field(default=10.0, gt=0, le=100)
    period_seconds: int = Field(default=300, ge=60)
    evaluation_minutes: int = Field(default=60, ge=5)
    max_nodes_per_evaluation: int = Field(default=3, ge=1)
    #: 0 by default: Karpenter brings a GPU pool back from zero, and an idle GPU node costs most.
    min_nodes_per_nodepool: int = Field(default=0, ge=0)
    drain_limit_seconds: int = Field(default=1800, ge=60)


SECTION = PolicySection("gpu_idle", GpuIdlePolicy)
