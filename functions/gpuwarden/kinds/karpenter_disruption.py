"""`karpenter-disruption`: Karpenter has begun to disrupt a node (drift, consolidation); the pods on it
are asked to checkpoint at once, nothing more (docs/cluster.md, "Beside Karpenter"; docs/events.md)."""

from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.notices import karpenter_disruption

SPEC = KindSpec(
    kind=Kind.KARPENTER_DISRUPTION,
    summary="Karpenter is disrupting a node (karpenter.sh/disrupted): its pods are asked to checkpoint now",
    voluntary=False,  # Karpenter's own disruption: gpuwarden neither waits nor drains
    route="gpu_signals",
    doc="docs/events.md#the-kinds",
    samples=("scheduler-gpu-health-scan.json",),
    scan=karpenter_disruption.scan,  # the every-minute scan: ask once per disruption, no cordon/evict/replace
)
