"""A scenario is data: the cluster, its workloads, how often AWS takes capacity away, and the policy.

Loaded from YAML or JSON and validated here; `builtin.yaml` beside this module is the default
(every number in it says where it comes from, or that it is an assumption).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

BUILTIN = Path(__file__).with_name("builtin.yaml")
MONTH_SECONDS = 30 * 86400.0


class SpotBand(StrEnum):
    """AWS Spot Instance Advisor's "frequency of interruption" bands (share of instances of a type
    interrupted during the trailing month), as AWS publishes them."""

    UNDER_5 = "<5%"
    FROM_5_TO_10 = "5-10%"
    FROM_10_TO_15 = "10-15%"
    FROM_15_TO_20 = "15-20%"
    OVER_20 = ">20%"

    @property
    def monthly_probability(self) -> float:
        """The band's midpoint; the open band >20 % is read as 25 % (an assumption: AWS gives no upper bound)."""
        return {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}[self.value]

    @property
    def rate_per_second(self) -> float:
        """Poisson rate whose chance of at least one interruption in 30 days is the band's probability."""
        return -math.log(1.0 - self.monthly_probability) / MONTH_SECONDS


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceType(_Model):
    name: str
    gpus: int = Field(ge=1)
    #: Spot Advisor band for this type (only read for Spot pools)
    spot_band: SpotBand = SpotBand.OVER_20
    #: seconds from NodeClaim to a Ready node with the GPU driver and device plugin up
    launch_seconds: float = Field(default=300.0, ge=0)


class Pool(_Model):
    name: str
    instance_type: str
    capacity_type: Literal["spot", "on-demand", "reserved"]
    nodes: int = Field(ge=0)
    consolidation_policy: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = "WhenEmpty"
    consolidate_after_seconds: float = Field(default=0.0, ge=0)
    #: Karpenter `disruption.budgets[].nodes` (no schedule): a count or a percentage
    budget_nodes: str = "10%"
    #: the NodePool's `disruption.budgets` as written (`nodes`, `reasons`, `schedule`, `duration`);
    #: None: one budget of `budget_nodes`
    budgets: list[dict[str, Any]] | None = None
    #: NodePool `spec.template.spec.expireAfter` in hours; None: `Never`. The pool's nodes at the
    #: start are of ages drawn from the seed (`sim/outcome/events.py`, `node_ages`)
    expire_after_hours: float | None = Field(default=None, gt=0)
    #: NodePool `spec.template.spec.terminationGracePeriod` in seconds; None: not set
    termination_grace_seconds: float | None = None
    #: AWS Health scheduled maintenance notices per node per 30 days (on-demand and reserved pools)
    maintenance_per_node_month: float = Field(default=0.0, ge=0)
    #: reserved pools: the Capacity Block ends this many hours after the scenario starts
    capacity_block_end_hours: float | None = None
    capacity_reservation_id: str | None = None


class Training(_Model):
    name: str
    pool: str
    jobs: int = Field(ge=0)
    gpus: int = Field(ge=1)
    checkpoint_interval_minutes: float = Field(gt=0)
    #: how long writing one checkpoint takes (periodic, requested or on SIGTERM)
    checkpoint_seconds: float = Field(ge=0)
    #: the job traps SIGTERM and writes a checkpoint before it exits (if its grace allows)
    saves_on_sigterm: bool = False
    grace_seconds: int = Field(default=30, ge=0)
    #: `gpuwarden.io/checkpoint` annotation (None: not opted in)
    checkpoint: str | None = "annotate"
    checkpoint_timeout_seconds: int | None = None
    #: the owner set `karpenter.sh/do-not-disrupt: "true"` on the pods
    do_not_disrupt: bool = False
    #: ranks of one distributed job, one pod per node (1: a single-pod job). All ranks restart from
    #: the job's last checkpoint when one of them stops (DDP / torchrun: docs/training-jobs.md)
    nodes_per_job: int = Field(default=1, ge=1)
    #: how the ranks are run: a `batch/v1` Indexed Job, or a JobSet of Indexed child Jobs
    controller: Literal["job", "jobset"] = "job"
    #: JobSet: ranks per child Job (the replicated Job's `parallelism`)
    pods_per_child_job: int = Field(default=4, ge=1)
    #: who writes a requested checkpoint: rank 0 (DDP: it holds the whole model) or every rank
    #: together (sharded: FSDP, torch.distributed.checkpoint): until they are asked, none is written
    checkpoint_writers: Literal["rank0", "all"] = "rank0"
    #: seconds a restart costs this job before it trains again (None: the scenario's
    #: `restart_overhead_seconds`)
    restart_overhead_seconds: float | None = Field(default=None, ge=0)


class Inference(_Model):
    name: str
    pool: str
    replicas: int = Field(ge=0)
    gpus: int = Field(ge=1)
    min_available: int = Field(ge=0)
    grace_seconds: int = Field(default=30, ge=0)


class Notebooks(_Model):
    name: str
    pool: str
    count: int = Field(ge=0)
    gpus: int = Field(ge=1)
    #: UTC hours of the working day: busy from..to, idle (GPU held, < threshold) otherwise
    busy_from_hour: int = Field(ge=0, le=23)
    busy_to_hour: int = Field(ge=1, le=24)
    weekdays_only: bool = True
    do_not_disrupt: bool = False


class Rebalance(_Model):
    #: chance that a rebalance recommendation precedes a Spot interruption
    before_interruption: float = Field(default=0.5, ge=0, le=1)
    lead_minutes_min: float = Field(default=10.0, ge=0)
    lead_minutes_max: float = Field(default=20.0, ge=0)
    #: recommendations with no interruption after them, per Spot node per 30 days
    false_per_node_month: float = Field(default=0.0, ge=0)


class Reactions(_Model):
    """Seconds from the EC2 event to the first write of each reactor."""

    karpenter_seconds: float = Field(default=2.0, ge=0)
    gpuwarden_seconds: float = Field(default=1.0, ge=0)
    #: Karpenter's provisioner batches pending pods this long before it launches
    provisioner_batch_seconds: float = Field(default=10.0, ge=0)
    #: Karpenter's termination controller requeues a drain this often
    terminator_requeue_seconds: float = Field(default=5.0, gt=0)


class Maintenance(_Model):
    #: notice given before the maintenance starts
    notice_hours: float = Field(default=48.0, gt=0)


class Scenario(_Model):
    name: str
    description: str = ""
    start: datetime = datetime(2026, 3, 2, tzinfo=UTC)
    days: float = Field(default=7.0, gt=0)
    seed: int = 7
    cluster: str = "ml-prod"
    region: str = "us-west-2"
    instance_types: list[InstanceType]
    pools: list[Pool]
    training: list[Training] = Field(default_factory=list)
    inference: list[Inference] = Field(default_factory=list)
    notebooks: list[Notebooks] = Field(default_factory=list)
    rebalance: Rebalance = Rebalance()
    maintenance: Maintenance = Maintenance()
    reactions: Reactions = Reactions()
    #: gpuwarden's policy document (the same model as deployed validates it)
    policy: dict[str, Any] = Field(default_factory=dict)
    #: runs behind the headline (`sim/outcome/seeds.py`): the Spot training pools alone, one run
    #: of `days` per seed from `seed` on (0: no headline, the one run's table only)
    headline_seeds: int = Field(default=0, ge=0)
    #: what a restart costs a training job before it trains again, once its pods run (pod start,
    #: image, collective initialisation, checkpoint load; waiting for a node is simulated): the
    #: "restart overhead" of Meta's ETTR model (arXiv:2410.21680). 300 s: an ASSUMPTION
    #: (docs/simulate.md#goodput); each training entry may set its own
    restart_overhead_seconds: float = Field(default=300.0, ge=0)

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        types = {t.name for t in self.instance_types}
        pools = {p.name for p in self.pools}
        for pool in self.pools:
            if pool.instance_type not in types:
                raise ValueError(f"pool {pool.name}: unknown instance type {pool.instance_type}")
            if pool.capacity_type == "reserved" and pool.capacity_block_end_hours is None:
                raise ValueError(f"pool {pool.name}: a reserved pool needs capacity_block_end_hours")
        workloads: list[Training | Inference | Notebooks] = [*self.training, *self.inference, *self.notebooks]
        for workload in workloads:
            if workload.pool not in pools:
                raise ValueError(f"{workload.name}: unknown pool {workload.pool}")
        return self

    def scaled(self, factor: int) -> Scenario:
        """The same cluster `factor` times over: every pool's nodes, every workload's jobs, replicas
        (and `min_available`) and notebooks; the same shapes, rates and policy (`simulate --scale`)."""
        if factor == 1:
            return self
        doc = self.model_dump(mode="json")
        for pool in doc["pools"]:
            pool["nodes"] *= factor
        for training in doc["training"]:
            training["jobs"] *= factor
        for inference in doc["inference"]:
            inference["replicas"] *= factor
            inference["min_available"] *= factor
        for notebooks in doc["notebooks"]:
            notebooks["count"] *= factor
        doc["name"] = f"{self.name} x{factor}"
        return Scenario.model_validate(doc)

    def restart_overhead(self, training: Training) -> float:
        given = training.restart_overhead_seconds
        return self.restart_overhead_seconds if given is None else given

    def setup(self) -> dict[str, Any]:
        """What a reader checks the week against, in `simulate --json` (`setup`): each pool's
        `expireAfter`, budgets and `terminationGracePeriod`, each training workload's do-not-disrupt,
        grace, checkpoint write and timeout and restart overhead. Each value's source is written
        beside it in the scenario file (docs/simulate.md, "The seeds' week")."""
        pool_keys = {"capacity_type", "nodes", "expire_after_hours", "budgets", "budget_nodes"}
        job_keys = {"pool", "jobs", "gpus", "nodes_per_job", "do_not_disrupt", "grace_seconds", "saves_on_sigterm"}
        job_keys |= {"checkpoint_seconds", "checkpoint_timeout_seconds", "checkpoint_interval_minutes"}
        return {
            "pools": {
                p.name: p.model_dump(mode="json", include=pool_keys | {"termination_grace_seconds"}) for p in self.pools
            },
            "training": {
                t.name: t.model_dump(mode="json", include=job_keys)
                | {"restart_overhead_seconds": self.restart_overhead(t)}
                for t in self.training
            },
        }

    def instance_type(self, name: str) -> InstanceType:
        return next(t for t in self.instance_types if t.name == name)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)

    def gpu_policy(self, override: dict[str, Any] | None = None) -> Any:
        from gpuwarden.kinds.registry import POLICY  # with the kinds' sections (gpuwarden/kinds/)

        doc = {"cluster": self.cluster, **(override if override is not None else self.policy)}
        return POLICY.model_validate(doc)


def load_scenario(path: Path | None = None, **overrides: Any) -> Scenario:
    """The scenario in `path` (YAML or JSON), or the built-in one; `overrides` replace top-level keys."""
    doc = yaml.safe_load((path or BUILTIN).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{path or BUILTIN}: a scenario is a mapping")
    doc.update({k: v for k, v in overrides.items() if v is not None})
    return Scenario.model_validate(doc)
