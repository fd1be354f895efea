"""Build a service's dependencies from Settings: the one place adapters are chosen."""

from __future__ import annotations

import getpass
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from gpuwarden.config import Settings, load_policy
from gpuwarden.domain.errors import CloudError, CloudNotFound, ClusterUnreachable, GpuwardenError
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.ports import CloudPort, HttpPort, KubePort, LedgerPort, SchedulerPort
from gpuwarden.services.engine.context import Deps, utcnow

if TYPE_CHECKING:
    from gpuwarden.domain.alerts_received import ReceivedAlert
    from gpuwarden.services.doctor.doctor import DoctorReport
    from gpuwarden.sources import RunbookRequest
    from gpuwarden.sources.rules import Rule


def deployed_rules(settings: Settings) -> tuple[Rule, ...]:
    """The EventBridge rules as deployed (with the configured GPU-idle alarm prefixes)."""
    from gpuwarden.kinds.registry import rules
    from gpuwarden.sources.rules import parse_prefixes

    return rules(parse_prefixes(settings.gpu_idle_alarm_prefixes))


class Lazy:
    """A port built on its first use: an event that needs no cluster (ignored at parse time, or
    a reason to stop before any read) never touches the network or the SDK's credential chain."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._target: Any = None
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._target is not None

    def build(self) -> Any:
        """The port, built now if it was not yet (a failure leaves it unbuilt, to be tried again)."""
        target = self._target
        if target is None:
            with self._lock:
                if self._target is None:
                    self._target = self._build()
                target = self._target
        return target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.build(), name)


def kube_api_client(settings: Settings, policy: Policy) -> Any:
    """KUBECONFIG when set (local runs, non-EKS clusters); else an EKS token from the role."""
    if settings.kubeconfig:
        from gpuwarden.adapters.kubeconfig import client_from_kubeconfig

        return client_from_kubeconfig(settings.kubeconfig.split(":")[0])
    if not settings.region:
        raise ClusterUnreachable(
            "no cluster: KUBECONFIG is not set, there is no ~/.kube/config and no AWS region to reach EKS "
            f"cluster {policy.cluster}"
        )
    from gpuwarden.adapters.eks_auth import eks_api_client

    try:
        return eks_api_client(policy.cluster, settings.region)
    except CloudNotFound as err:  # both causes: no kubeconfig named, and EKS has no such cluster
        raise ClusterUnreachable(
            "no cluster: KUBECONFIG is not set and there is no ~/.kube/config, so gpuwarden asked EKS in "
            f"{settings.region} (the AWS "
            f"settings) for cluster {policy.cluster}, and EKS has no such cluster: {err}"
        ) from err
    except CloudError as err:  # the same type (decisions read it), the message naming both causes
        said = type(err)(
            f"KUBECONFIG is not set (nor ~/.kube/config), so gpuwarden asked EKS in {settings.region} "
            f"for cluster {policy.cluster}: {err}"
        )
        raise (said.after_retries() if err.retried else said) from err


def same_cluster(settings: Settings, policy: Policy) -> None:
    """The kubeconfig's cluster is the policy's, or exit 2 naming both, before anything is read
    (docs/cli.md#the-right-cluster). Only where a cluster was named: a policy, or GPUWARDEN_CLUSTER."""
    named = settings.policy_file or settings.policy_parameter or settings.cluster
    if settings.kubeconfig and named:
        from gpuwarden.adapters.cluster_identity import check_cluster

        check_cluster(settings.kubeconfig.split(":")[0], policy.cluster)


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
    from gpuwarden.kinds.registry import KARPENTER_REASONS, VOLUNTARY

    policy = policy or load_policy(settings)
    chosen = policy
    if api_client is None:
        same_cluster(settings, policy)

    def kube_client() -> KubePort:
        client = api_client if api_client is not None else kube_api_client(settings, chosen)
        return KubeClient(client, qps=settings.kube_qps, burst=settings.kube_burst)

    kube: KubePort = kube_client() if api_client is not None else cast(KubePort, Lazy(kube_client))
    cloud: CloudPort = Cloud(settings.region)
    http: HttpPort = PodHttp()
    is_dry = settings.dry_run if dry_run is None else dry_run
    if is_dry:
        kube, cloud, http = _dry_run_ports(kube, cloud, http, observe=settings.observe)
    fixed_now = settings.now

    def window_clock() -> datetime:
        return fixed_now or utcnow()

    return Deps(
        kube=kube,
        cloud=cloud,
        ledger=ledger or ledger_for(settings),
        http=http,
        policy=policy,
        voluntary_kinds=VOLUNTARY,
        karpenter_reasons=KARPENTER_REASONS,
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


def _dry_run_ports(
    kube: KubePort, cloud: CloudPort, http: HttpPort, *, observe: bool = False
) -> tuple[KubePort, CloudPort, HttpPort]:
    from gpuwarden.adapters.dry_run import DryRunCloud, DryRunHttp, DryRunKube

    dry_kube = DryRunKube(kube, observe=observe)
    return cast(KubePort, dry_kube), cast(CloudPort, DryRunCloud(cloud)), cast(HttpPort, DryRunHttp(http))


def dry_run_view(deps: Deps) -> Deps:
    """The same deps with every write imagined (a runbook request with ``dry_run``, or a plan)."""
    if deps.dry_run:
        return deps
    kube, cloud, http = _dry_run_ports(deps.kube, deps.cloud, deps.http)
    return replace(deps, kube=kube, cloud=cloud, http=http, scheduler=None, dry_run=True)


def runbook_deps(deps: Deps, request: RunbookRequest) -> Deps:
    """A runbook request's ports: dry-run for ``dry_run`` and for the read-only actions (plan, status)."""
    from gpuwarden.services.runbook.actions import READ_ONLY_ACTIONS

    return dry_run_view(deps) if request.dry_run or request.action in READ_ONLY_ACTIONS else deps


def doctor_report() -> DoctorReport:
    """`gpuwarden doctor` as the CLI runs it: KUBECONFIG (or the policy's EKS cluster),
    GPUWARDEN_POLICY_FILE/PARAMETER, the AWS chain. Every failure becomes a finding."""
    from gpuwarden.adapters.cluster_reads import cluster_has_gpu_metric, reads_on
    from gpuwarden.kinds.registry import DOCTOR_CHECKS, SWITCHES
    from gpuwarden.services.doctor.doctor import DoctorReads, diagnose

    settings = Settings.from_env()
    policy: Policy | None = None
    policy_error: str | None = None
    try:
        policy = load_policy(settings)
    except GpuwardenError as err:
        policy_error = str(err)
    effective = policy or Policy(cluster=settings.cluster or "default")
    if policy is not None or settings.cluster:
        same_cluster(settings, effective)
    where = f"KUBECONFIG {settings.kubeconfig}" if settings.kubeconfig else f"EKS cluster {effective.cluster}"
    try:
        reads: DoctorReads | str = reads_on(lambda: kube_api_client(settings, effective), where)
    except GpuwardenError as err:
        reads = str(err)
    now = settings.now or datetime.now(UTC)
    source = settings.policy_file or settings.policy_parameter
    return diagnose(
        reads,
        policy,
        policy_error,
        lambda c: cluster_has_gpu_metric(settings.region, c),
        now,
        effective.cluster,
        policy_source=source,
        switches=SWITCHES,
        kind_checks=DOCTOR_CHECKS,
        received=alerts_received(settings),
    )


def alerts_received(settings: Settings) -> list[ReceivedAlert] | str | None:
    """The alerts last received, from the state table (None: no table configured; a str: why not read)."""
    if not settings.state_table:
        return None
    from gpuwarden.adapters.alerts_received import recall

    try:
        return recall(settings.state_table, settings.region)
    except GpuwardenError as err:
        return str(err)
