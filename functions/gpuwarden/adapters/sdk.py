"""AWS SDK clients: every one made from one botocore session per process, when first needed.

A client is what ``boto3.client`` returns (boto3 adds nothing to a client of the services used
here: its additions are resources and S3 transfers), and the standard chain (credentials, region,
``AWS_ENDPOINT_URL``) applies as it does there. boto3 itself stays off the handlers' path: its
import (with s3transfer) and a session per client cost each cold start ~0.2 s of CPU
(docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

_lock = threading.Lock()  # a botocore session is not thread-safe; the clients it makes are


@cache
def session() -> Any:
    """The process's botocore session (its loaders cache the service models and endpoints)."""
    import botocore.session

    return botocore.session.get_session()


def client(service: str, region: str | None = None, config: Any = None) -> Any:
    """A new client of ``service`` (``region``: None reads AWS_REGION, as the SDK does)."""
    with _lock:
        return session().create_client(service, region_name=region, config=config)
