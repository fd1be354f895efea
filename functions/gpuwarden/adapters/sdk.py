"""AWS SDK clients, made when first needed: each from a botocore session of its own, all sharing
one data loader (the service models and endpoints it has read, cached once per process).

A client is what ``boto3.client`` returns (boto3 adds nothing to a client of the services used
here: its additions are resources and S3 transfers), and the standard chain (credentials, region,
``AWS_ENDPOINT_URL``) applies as it does there, resolved for each client as a new boto3 session
would. boto3 itself stays off the handlers' path: its import (with s3transfer) and a session per
client that reads every model again cost each cold start ~0.2 s of CPU (docs/benchmarks.md,
"Cold start").
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()  # a botocore session is not thread-safe; the clients it makes are
_loader: list[Any] = []  # the first session's data loader, shared by every later one

#: Models of our own beside botocore's (on the shared loader's search path): ``ec2-lookup`` is
#: botocore's EC2 model cut to `LOOKUP_OPERATIONS` (tests/unit/test_sdk_models.py writes and checks
#: it). A Spot warning's instance lookup is the only EC2 call of a cold interruption function, and
#: the whole EC2 model (550 KB compressed) cost its first client most of its ~0.35 s of CPU
#: (docs/benchmarks.md, "Cold start and the EC2 model"); EC2's other calls keep the whole model.
MODELS = Path(__file__).resolve().parent / "models"
LOOKUP_SERVICE = "ec2-lookup"
LOOKUP_OPERATIONS = ("DescribeInstances",)
EC2_API_VERSION = "2016-11-15"


def session() -> Any:
    """A new botocore session on the process's shared data loader."""
    import botocore.session

    made = botocore.session.get_session()
    with _lock:
        if _loader:
            made.register_component("data_loader", _loader[0])
        else:
            loader = made.get_component("data_loader")
            loader.search_paths.append(str(MODELS))
            _loader.append(loader)
    return made


def client(service: str, region: str | None = None, config: Any = None, *, on: Any = None) -> Any:
    """A new client of ``service`` (``region``: None reads AWS_REGION, as the SDK does), from the
    session ``on`` (one of `session`'s) when its credentials are needed too, else a new one."""
    made = on if on is not None else session()
    with _lock:
        return made.create_client(service, region_name=region, config=config)
