"""Logger and Metrics (Powertools) and the metric names gpuwarden emits.

Tracing stays off the cold path: `tracer()` imports the X-Ray SDK only when a handler
asks for it and POWERTOOLS_TRACE_DISABLED is not set.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from gpuwarden.domain.actions import Metric

__all__ = ["Metric", "count_event", "logger", "metrics", "put", "tracer"]

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "gpuwarden"))
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Gpuwarden"))


def _disabled() -> bool:
    return os.environ.get("POWERTOOLS_METRICS_DISABLED", "").strip().lower() in ("1", "true", "yes")


def put(metric: Metric, value: float = 1.0, unit: str = "Count") -> None:
    """One EMF value. With POWERTOOLS_METRICS_DISABLED (the CLI sets it) nothing is buffered:
    Powertools prints a full buffer (100 values) to stdout on its own, which would mix EMF
    documents into the CLI's JSON result."""
    if _disabled():
        return
    from aws_lambda_powertools.metrics import MetricUnit

    metrics.add_metric(name=metric.value, unit=MetricUnit(unit), value=value)


def count_event(kind: str, outcome: str) -> None:
    """`Events` by kind and outcome (the dashboard's first widget), as its own EMF document."""
    if _disabled():
        return
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with single_metric(
        name=Metric.EVENTS.value,
        unit=MetricUnit.Count,
        value=1,
        namespace=metrics.namespace,
        default_dimensions={"service": logger.service, "kind": kind, "outcome": outcome},
    ):
        pass


def tracer() -> Any:
    from aws_lambda_powertools import Tracer

    return Tracer()
