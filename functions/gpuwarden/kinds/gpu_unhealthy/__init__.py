"""`gpu-unhealthy`: a failing GPU, from the GPU-health scan or an Alertmanager alert (docs/gpu-signals.md)."""

from dataclasses import replace

from gpuwarden.domain.decide import drain_with
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.gpu_unhealthy import doctor
from gpuwarden.kinds.gpu_unhealthy import use_case as gpu_health
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.hooks import Admission, KindHooks

SPEC = KindSpec(
    kind=Kind.GPU_UNHEALTHY,
    summary="a node's GPU is failing: drain it before node repair replaces it without draining",
    voluntary=False,
    route="gpu_signals",
    doc="docs/gpu-signals.md#the-gpu-health-scan",
    # as Spot's (pods protected from Karpenter's drain, no second replacement), with the breaker
    # (gpu_health.max_unhealthy_percent) before and after the mark; the mark carries no replacement
    # claim: a node the recount gives back must not keep one
    hooks=KindHooks(
        admission=Admission(
            plan=drain_with(gpu_health.WHY),
            guard=gpu_health.breaker,
            after_mark=gpu_health.recount,
            stopped=gpu_health.held_back,
        ),
        delivery=replace(karpenter.INVOLUNTARY, claim_with_mark=False),
    ),
    handle=gpu_health.handle_gpu_unhealthy,
    switch="gpu_health.enabled",
    samples=("alertmanager-sns-json.json", "alertmanager-sns-text.json"),
    scan=gpu_health.scan,
    doctor=doctor.DOCTOR,
)
