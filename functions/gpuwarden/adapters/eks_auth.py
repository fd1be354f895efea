"""An ApiClient for an EKS cluster from the function's IAM role (no kubeconfig, no aws CLI).

The token is what `aws eks get-token` prints: a presigned STS GetCallerIdentity URL with
the cluster name in the signed `x-k8s-aws-id` header, valid 15 minutes; it is renewed
after 10 through the client's `refresh_api_key_hook`.
"""

from __future__ import annotations

import base64
import tempfile
import time
from typing import Any

from gpuwarden.adapters.errors import aws_call

TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 - the scheme, not a secret
_RENEW_AFTER_SECONDS = 600
#: Bumped by `expire_tokens`: a token issued under an older generation is renewed before its next use.
_generation = [0]


def expire_tokens() -> None:
    """Every EKS token issued so far is renewed before its next request. Registered with Lambda
    SnapStart's runtime hooks (`snapshot_restore_py.register_after_restore`): an environment
    restored from a snapshot may run hours after its init issued the token (valid 15 minutes),
    and the monotonic clock the renewal reads is not known to span the pause (docs/deploy.md,
    "SnapStart")."""
    _generation[0] += 1


try:  # the Lambda Python runtime (3.12+) provides it; elsewhere nothing restores a snapshot
    from snapshot_restore_py import register_after_restore
except ImportError:  # pragma: no cover - outside Lambda without the dev extra
    pass
else:
    register_after_restore(expire_tokens)


def eks_token(cluster: str, region: str) -> str:
    from botocore.signers import RequestSigner

    from gpuwarden.adapters.sdk import client, session

    made = session()
    sts = client("sts", region, on=made)
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", made.get_credentials(), sts.meta.events
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def eks_api_client(cluster: str, region: str) -> Any:
    from kubernetes import client

    from gpuwarden.adapters import sdk

    with aws_call(f"EKS DescribeCluster {cluster} ({region})"):
        described = sdk.client("eks", region).describe_cluster(name=cluster)["cluster"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(described["certificateAuthority"]["data"]))
    configuration = client.Configuration()
    configuration.host = described["endpoint"]
    configuration.ssl_ca_cert = ca.name
    configuration.connection_pool_maxsize = 32
    issued = [0.0, -1.0]  # monotonic time, generation

    def refresh(config: Any) -> None:
        if time.monotonic() - issued[0] > _RENEW_AFTER_SECONDS or issued[1] != _generation[0]:
            config.api_key = {"authorization": eks_token(cluster, region)}
            config.api_key_prefix = {"authorization": "Bearer"}
            issued[:] = [time.monotonic(), _generation[0]]

    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    with aws_call(f"EKS token for {cluster} (STS presign, {region})"):
        refresh(configuration)
    return client.ApiClient(configuration)
