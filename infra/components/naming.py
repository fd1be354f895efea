"""Physical names of one gpuwarden in its stack (log groups, the dashboard, the scan's schedule).

The repository's own app holds one gpuwarden per stack: names start with the stack's name, as
they always have. A team's own stack may hold several (one per cluster: docs/deploy.md, "In your
own CDK app"): each `Gpuwarden` construct then sets this context key to ``<stack>-<its id>`` so
that no two share a name.
"""

from __future__ import annotations

import hashlib

from aws_cdk import Stack
from constructs import IConstruct

NAME_PREFIX = "gpuwarden:namePrefix"


def name_prefix(scope: IConstruct) -> str:
    """The prefix of every physical name under ``scope``'s gpuwarden."""
    value = scope.node.try_get_context(NAME_PREFIX)
    return value if isinstance(value, str) and value else Stack.of(scope).stack_name


def own_name(scope: IConstruct, name: str, limit: int = 64) -> str:
    """``name`` as it is in the repository's app; prefixed when several gpuwardens share a stack (the
    Scheduler's schedules live in one group per gpuwarden, but tools such as cfn-lint read a schedule's
    name alone as its identity), kept within ``limit`` characters by a hash."""
    prefix = scope.node.try_get_context(NAME_PREFIX)
    if not (isinstance(prefix, str) and prefix):
        return name
    full = f"{prefix}-{name}"
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: limit - len(name) - 10]}-{digest}-{name}"[-limit:]
