"""An in-process Kubernetes API server simulator for tests, benchmarks and the demo."""

from sim.clock import SimClock
from sim.core import KubeSim
from sim.errors import ApiError
from sim.exec_ws import ExecRecord, ExecResult
from sim.faults import Fault, RequestInfo
from sim.server import RequestRecord

__all__ = [
    "ApiError",
    "ExecRecord",
    "ExecResult",
    "Fault",
    "KubeSim",
    "RequestInfo",
    "RequestRecord",
    "SimClock",
]
