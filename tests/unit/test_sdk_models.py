"""The EC2 model the instance lookup's client reads (`adapters/sdk.py`, `LOOKUP_SERVICE`): botocore's
own EC2 model cut to DescribeInstances and the shapes it reaches, documentation dropped. Loading
the whole model (550 KB compressed) was most of the first Spot warning's EC2 client; this one parses
in milliseconds (docs/benchmarks.md, "Cold start and the EC2 model").

Regenerate after a botocore upgrade: ``.venv/bin/python -m tests.unit.test_sdk_models``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
from moto import mock_aws

from gpuwarden.adapters import sdk
from gpuwarden.adapters.aws import Cloud


def _reached(shapes: dict[str, Any], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        shape = shapes[name]
        todo += [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
        todo += [member["shape"] for member in (shape.get("members") or {}).values()]
    return seen


def _undocumented(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _undocumented(v) for k, v in value.items() if k != "documentation"}
    if isinstance(value, list):
        return [_undocumented(v) for v in value]
    return value


def trimmed() -> dict[str, Any]:
    """The lookup's model, from the installed botocore's EC2 model."""
    from botocore.loaders import Loader

    model = Loader().load_service_model("ec2", "service-2")
    operations = {name: model["operations"][name] for name in sdk.LOOKUP_OPERATIONS}
    roots = [op[part]["shape"] for op in operations.values() for part in ("input", "output")]
    shapes = {name: model["shapes"][name] for name in sorted(_reached(model["shapes"], roots))}
    cut: dict[str, Any] = _undocumented(
        {"version": model["version"], "metadata": model["metadata"], "operations": operations, "shapes": shapes}
    )
    return cut


def _rules() -> bytes:
    from botocore.loaders import Loader

    found = Loader().load_service_model("ec2", "endpoint-rule-set-1")
    return json.dumps(found, sort_keys=True, separators=(",", ":")).encode()


def _files() -> dict[Path, bytes]:
    where = sdk.MODELS / sdk.LOOKUP_SERVICE / sdk.EC2_API_VERSION
    model = json.dumps(trimmed(), sort_keys=True, separators=(",", ":")).encode()
    return {where / "service-2.json": model, where / "endpoint-rule-set-1.json": _rules()}


def test_the_committed_model_is_botocores_cut() -> None:
    for path, content in _files().items():
        assert path.read_bytes() == content, f"{path} differs from the installed botocore's: regenerate it"


def test_the_lookup_never_loads_the_whole_ec2_model() -> None:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        spec = [{"ResourceType": "instance", "Tags": [{"Key": "eks:eks-cluster-name", "Value": "ml-prod"}]}]
        made = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=spec)["Instances"][0]
        loaded: list[str] = []
        loader = sdk.session().get_component("data_loader")
        real = loader.load_service_model

        def counted(service: str, type_name: str, api_version: str | None = None) -> Any:
            loaded.append(f"{service}/{type_name}")
            return real(service, type_name, api_version)

        loader.load_service_model = counted
        try:
            found = Cloud("us-west-2").instance_identity(made["InstanceId"])
        finally:
            del loader.load_service_model
    assert found is not None
    assert found.private_dns_name == made["PrivateDnsName"]
    assert found.tags["eks:eks-cluster-name"] == "ml-prod"
    assert "ec2/service-2" not in loaded
    assert f"{sdk.LOOKUP_SERVICE}/service-2" in loaded


if __name__ == "__main__":
    for path, content in _files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        print(f"wrote {path} ({len(content):,} bytes)")
