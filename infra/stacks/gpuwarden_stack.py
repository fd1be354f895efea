"""The repository's own stack: one `Gpuwarden` construct (infra/construct.py) for the cluster of `-c cluster=…`.

The construct is the stack's default child (id ``Default``, which CDK leaves out of logical ids), so
every logical id is what it was before the construct existed: a stack deployed from an older version
updates in place.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from infra.config import Settings
from infra.construct import DEFAULT_ID, Gpuwarden


class GpuwardenStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings
        self.gpuwarden = Gpuwarden(self, DEFAULT_ID, cluster=settings.cluster, settings=settings)
        self.alarms = self.gpuwarden.alarms
