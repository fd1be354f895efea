"""An in-process Kubernetes API server simulator for tests, benchmarks and the demo."""

from sim.apiserver.core import KubeSim
from sim.apiserver.errors import ApiError
from sim.apiserver.exec_ws import ExecRecord, ExecResult
from sim.apiserver.faults import Fault, RequestInfo
from sim.apiserver.http_state import RequestRecord
from sim.clock import SimClock

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
