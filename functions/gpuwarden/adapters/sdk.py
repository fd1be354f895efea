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
from typing import Any

_lock = threading.Lock()  # a botocore session is not thread-safe; the clients it makes are
_loader: list[Any] = []  # the first session's data loader, shared by every later one


def session() -> Any:
    """A new botocore session on the process's shared data loader."""
    import botocore.session

    made = botocore.session.get_session()
    with _lock:
        if _loader:
            made.register_component("data_loader", _loader[0])
        else:
            _loader.append(made.get_component("data_loader"))
    return made


def client(service: str, region: str | None = None, config: Any = None, *, on: Any = None) -> Any:
    """A new client of ``service`` (``region``: None reads AWS_REGION, as the SDK does), from the
    session ``on`` (one of `session`'s) when its credentials are needed too, else a new one."""
    made = on if on is not None else session()
    with _lock:
        return made.create_client(service, region_name=region, config=config)
