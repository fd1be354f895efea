"""Build a service's dependencies from Settings: the one place adapters are chosen."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from gpuwarden.config import Settings, load_policy
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.ports import CloudPort, HttpPort, KubePort, LedgerPort, SchedulerPort
from gpuwarden.services.context import Deps, utcnow

if TYPE_CHECKING:
    from gpuwarden.sources import RunbookRequest


def kube_api_client(settings: Settings, policy: Policy) -> Any:
    """KUBECONFIG when set (local runs, non-EKS clusters); else an EKS token from the role."""
    if settings.kubeconfig:
        from gpuwarden.adapters.kube import client_from_kubeconfig

        return client_from_kubeconfig(settings.kubeconfig.split(":")[0])
    if not settings.region:
        raise GpuwardenError("no KUBECONFIG and no AWS region: cannot reach the cluster")
    from gpuwarden.adapters.eks_auth import eks_api_client

    return eks_api_client(policy.cluster, settings.region)


def ledger_for(settings: Settings) -> LedgerPort:
    if settings.state_table:
        from gpuwarden.adapters.ledger import DynamoLedger

        return DynamoLedger(settings.state_table, settings.region)
    from gpuwarden.adapters.ledger import MemoryLedger

    return MemoryLedger()


def build_deps(
    settings: Settings,
    *,
    dry_run: bool | None = None,
    caller: str | None = None,
    start_drain: Callable[[dict[str, Any]], None] | None = None,
    api_client: Any = None,
    ledger: LedgerPort | None = None,
    policy: Policy | None = None,
) -> Deps:
    from gpuwarden.adapters.aws import Cloud
    from gpuwarden.adapters.http import PodHttp
    from gpuwarden.adapters.kube import KubeClient

    policy = policy or load_policy(settings)
    client = api_client if api_client is not None else kube_api_client(settings, policy)
    kube: KubePort = KubeClient(client, qps=settings.kube_qps, burst=settings.kube_burst)
    cloud: CloudPort = Cloud(settings.region)
    http: HttpPort = PodHttp()
    is_dry = settings.dry_run if dry_run is None else dry_run
    if is_dry:
        kube, cloud, http = _dry_run_ports(kube, cloud, http)
    fixed_now = settings.now

    def window_clock() -> datetime:
        return fixed_now or utcnow()

    return Deps(
        kube=kube,
        cloud=cloud,
        ledger=ledger or ledger_for(settings),
        http=http,
        policy=policy,
        window_clock=window_clock,
        dry_run=is_dry,
        caller=caller or getpass.getuser(),
        start_drain=start_drain,
        scheduler=None if is_dry else scheduler_for(settings),  # a dry run schedules nothing either
    )


def scheduler_for(settings: Settings) -> SchedulerPort | None:
    """EventBridge Scheduler when deployed (group, target and role set); None locally."""
    if not (settings.schedule_group and settings.windows_function_arn and settings.scheduler_role_arn):
        return None
    from gpuwarden.adapters.scheduler import EventBridgeScheduler

    return EventBridgeScheduler(
        settings.schedule_group,
        settings.windows_function_arn,
        settings.scheduler_role_arn,
        settings.region,
        dead_letter_arn=settings.scheduler_dead_letter_arn,
    )


def _dry_run_ports(kube: KubePort, cloud: CloudPort, http: HttpPort) -> tuple[KubePort, CloudPort, HttpPort]:
    from gpuwarden.adapters.dry_run import DryRunCloud, DryRunHttp, DryRunKube

    return cast(KubePort, DryRunKube(kube)), cast(CloudPort, DryRunCloud(cloud)), cast(HttpPort, DryRunHttp(http))


def dry_run_view(deps: Deps) -> Deps:
    """The same deps with every write imagined (a runbook request with ``dry_run``, or a plan)."""
    if deps.dry_run:
        return deps
    kube, cloud, http = _dry_run_ports(deps.kube, deps.cloud, deps.http)
    return replace(deps, kube=kube, cloud=cloud, http=http, scheduler=None, dry_run=True)


def runbook_deps(deps: Deps, request: RunbookRequest) -> Deps:
    """A runbook request's ports: dry-run for ``dry_run`` and for the read-only actions (plan, status)."""
    from gpuwarden.services.runbook import READ_ONLY_ACTIONS

    return dry_run_view(deps) if request.dry_run or request.action in READ_ONLY_ACTIONS else deps
