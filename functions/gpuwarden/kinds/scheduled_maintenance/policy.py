"""The scheduled-maintenance kind's policy section, `maintenance` (docs/policy.md#switches):
declared by the kind's spec (`KindSpec.policy`), read with
`domain.policy.section_of(policy, MaintenancePolicy)`."""

from __future__ import annotations

from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import PolicySection


class MaintenancePolicy(Frozen):
    #: switch: AWS Health scheduled maintenance planned into a window and drained ahead of it
    enabled: bool = True


SECTION = PolicySection("maintenance", MaintenancePolicy)
