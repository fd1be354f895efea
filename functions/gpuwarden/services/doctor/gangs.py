"""`checkpoint-gangs`: the doctor's look at jobs that span several pods (docs/training-jobs.md),
on the pods the doctor read once (`facts.ClusterFacts`).

- a gang whose pods disagree on their checkpoint annotations (put them in the pod template);
- a gang that asks only its leader and has no leader gpuwarden can find (every pod is asked);
- a gang spread over several zones (a replacement cannot keep it together; cross-zone traffic);
- `signal:` aimed at a container whose PID 1 is `torchrun` (its elastic agent has no SIGUSR1
  handler, and as PID 1 an unhandled signal is dropped: the request would time out);
- bad gang input (an invalid `checkpoint-group`, an unknown `checkpoint-ask`, two leaders).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import CheckpointSpec, checkpoint_spec
from gpuwarden.domain.gangs import ASK, BadGangInput, Gang, form_gang, gang_refs, is_gang, zones_of
from gpuwarden.domain.policy import Policy
from gpuwarden.domain.views import PodView
from gpuwarden.domain.wording import count
from gpuwarden.services.doctor.facts import ClusterFacts, Finding, Severity

CHECK = "checkpoint-gangs"
_SHOWN = 4
#: What the workload's owner sets alike on every pod of a gang (the pod template's annotations).
_ALIKE = (ann.CHECKPOINT, ann.CHECKPOINT_TIMEOUT, ann.CHECKPOINT_CONTAINER, ASK)
_TORCHRUN_FIX = (
    "torchrun's agent does not handle SIGUSR1: use gpuwarden.io/checkpoint: annotate and have rank 0 watch "
    "the downward-API annotations file, or exec:<a command that signals the training processes>, or start the "
    "container with a wrapper entrypoint that traps SIGUSR1 and forwards it to the ranks (docs/training-jobs.md)"
)


def runs_torchrun(command: Sequence[str]) -> bool:
    """Whether a container's command line starts torchrun as its process (PID 1), directly or as
    `python -m torch.distributed.run` (what torchrun is)."""
    if not command:
        return False
    first = posixpath.basename(command[0])
    if first == "torchrun":
        return True
    return first.startswith("python") and list(command[1:3]) in (
        ["-m", "torch.distributed.run"],
        ["-m", "torch.distributed.launch"],
    )


def _torchrun_signal(pod: PodView, commands: Mapping[str, Sequence[str]], policy: Policy) -> str | None:
    spec = checkpoint_spec(pod, policy.checkpoint.default_timeout_seconds, policy.checkpoint.allow_exec)
    if not isinstance(spec, CheckpointSpec) or spec.mode != "signal":
        return None
    if runs_torchrun(commands.get(spec.container, ())):
        return f"{pod.key}: signal:{spec.signal} goes to PID 1 of {spec.container!r}, which is torchrun"
    return None


def gangs_of(pods: Sequence[PodView]) -> tuple[list[Gang], list[BadGangInput]]:
    """Every gang among ``pods`` (no extra reads: the doctor listed every pod already)."""
    refs, bad = gang_refs(pods)
    by_namespace: dict[str, list[PodView]] = {}
    for pod in pods:
        by_namespace.setdefault(pod.namespace, []).append(pod)
    gangs = [form_gang(ref, by_namespace.get(ref.namespace, [])) for ref in refs]
    bad += [b for g in gangs for b in g.excluded]
    return [g for g in gangs if is_gang(g)], bad


def _disagreement(gang: Gang) -> str | None:
    differing = [key for key in _ALIKE if len({p.annotations.get(key) for p in gang.members}) > 1]
    if not differing:
        return None
    return f"{gang.key} ({gang.ref.by}): its pods differ on {', '.join(differing)}"


def check_checkpoint_gangs(facts: ClusterFacts, policy: Policy) -> Finding:
    gangs, bad = gangs_of(facts.pods)
    errors = [f"{b.pod}: {b.reason}" for b in bad]
    errors += [why for p in facts.pods if (why := _torchrun_signal(p, facts.commands.get(p.key, {}), policy))]
    warnings = [why for g in gangs if (why := _disagreement(g))]
    warnings += [f"{g.key}: asks only its leader, but {g.no_leader}" for g in gangs if g.no_leader]
    spread = [(g.key, sorted(z)) for g in gangs if len(z := zones_of(g, facts.zone_of_node)) > 1]
    warnings += [f"{key} runs in {len(zones)} zones ({', '.join(zones)})" for key, zones in spread]
    found = errors + warnings
    if not found:
        return Finding(CHECK, Severity.OK, f"{count(len(gangs), 'gang')} of several pods, each consistent")
    fixes = []
    if any("torchrun" in e for e in errors):
        fixes.append(_TORCHRUN_FIX)
    if bad:
        fixes.append("fix gpuwarden.io/checkpoint-group (a label value), checkpoint-ask (all|leader), one leader")
    if warnings:
        fixes.append(
            "set the gpuwarden.io/checkpoint* annotations in the pod template, name one leader, keep a gang in one zone"
        )
    shown = "; ".join(found[:_SHOWN]) + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")
    return Finding(CHECK, Severity.ERROR if errors else Severity.WARN, shown, "; ".join(fixes))
