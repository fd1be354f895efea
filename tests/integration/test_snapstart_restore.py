"""SnapStart's restore hook (docs/deploy.md, "SnapStart"): an environment restored from a snapshot
renews its EKS token before its next request, whatever the token's age by the monotonic clock.
EKS is moto's; the hook is run from the runtime hooks' own registry (`snapshot_restore_py`, the
package the Lambda Python runtime provides), as the runtime runs it after a restore."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
import snapshot_restore_py

from gpuwarden.adapters import eks_auth


@pytest.fixture
def cluster(aws: None) -> str:
    eks = boto3.client("eks", region_name="us-west-2")
    eks.create_cluster(
        name="ml-prod",
        roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": ["subnet-0a"]},
    )
    return "ml-prod"


def test_a_restored_environment_renews_its_eks_token_before_the_next_request(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a client made in the init phase (its token issued then), and token issues counted
    issued: list[str] = []
    real = eks_auth.eks_token

    def counted(name: str, region: str) -> str:
        issued.append(name)
        return real(name, region)

    monkeypatch.setattr(eks_auth, "eks_token", counted)
    api: Any = eks_auth.eks_api_client(cluster, "us-west-2")
    config = api.configuration
    assert len(issued) == 1
    assert config.api_key["authorization"].startswith(eks_auth.TOKEN_PREFIX)
    # a request before any restore reuses it (renewed after 10 minutes only)
    config.refresh_api_key_hook(config)
    assert len(issued) == 1
    # When Lambda restores the environment from its snapshot and runs the registered hooks
    hooks = snapshot_restore_py.get_after_restore()
    assert any(func is eks_auth.expire_tokens for func, _, _ in hooks)
    for func, args, kwargs in hooks:
        func(*args, **kwargs)
    # Then the next request carries a new token, and the one after reuses that
    config.refresh_api_key_hook(config)
    assert issued == [cluster, cluster]
    config.refresh_api_key_hook(config)
    assert len(issued) == 2
