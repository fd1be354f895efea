"""JobSet's webhook configurations on the plane (realplane/plane/jobset.py; docs/realplane.md, "JobSet").

Given the files the build copies from sigs.k8s.io/jobset v0.11.0's config/components/webhook (here
in their shape: the kubebuilder manifests, and the kustomize patches that replace each pod webhook
with one carrying an objectSelector), when the plane makes the webhook configurations, then each
webhook calls the controller's URL on loopback with the plane's CA, the patches are applied as
kustomize applies them, and a patch of any other kind is refused rather than guessed at.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from realplane.build import pins
from realplane.plane import jobset

SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def _hook(name: str, path: str, group: str, resource: str) -> dict[str, Any]:
    return {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "name": name,
        "rules": [{"apiGroups": [group], "apiVersions": ["v1alpha2" if group else "v1"], "resources": [resource]}],
        "sideEffects": "None",
    }


def _config(kind: str, prefix: str) -> dict[str, Any]:
    verb = "mutate" if prefix == "mutating" else "validate"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"{prefix}-webhook-configuration"},
        "webhooks": [
            _hook(f"{verb[0]}jobset.kb.io", f"/{verb}-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "jobsets"),
            _hook(f"{verb[0]}pod.kb.io", f"/{verb}--v1-pod", "", "pods"),
        ],
    }


@pytest.fixture
def share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / jobset.WEBHOOKS
    folder.mkdir()
    kinds = (("MutatingWebhookConfiguration", "mutating"), ("ValidatingWebhookConfiguration", "validating"))
    manifests = [_config(kind, prefix) for kind, prefix in kinds]
    (folder / "manifests.yaml").write_text(yaml.safe_dump_all(manifests))
    for manifest, (_, prefix) in zip(manifests, kinds, strict=True):
        pod_hook = dict(manifest["webhooks"][1], objectSelector=SELECTOR)
        (folder / f"{prefix}-patch.yaml").write_text(
            yaml.safe_dump([{"op": "replace", "path": "/webhooks/1", "value": pod_hook}])
        )
    monkeypatch.setattr(pins, "share_dir", lambda: tmp_path)
    return folder


def test_every_webhook_calls_the_controller_on_loopback_with_the_planes_ca(share: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nplane CA\n-----END CERTIFICATE-----\n")
    configs = jobset.webhook_configurations(46245, ca)
    assert [(c["kind"], c["metadata"]["name"]) for c in configs] == [
        ("MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration"),
    ]
    hooks = [hook for config in configs for hook in config["webhooks"]]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:46245/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:46245/mutate--v1-pod",
        "https://127.0.0.1:46245/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "https://127.0.0.1:46245/validate--v1-pod",
    ]
    assert {base64.b64decode(h["clientConfig"]["caBundle"]) for h in hooks} == {ca.read_bytes()}
    assert all("service" not in h["clientConfig"] for h in hooks)
    # the kustomize patches: only the pod webhooks see only a JobSet's pods
    assert [h.get("objectSelector") for h in hooks] == [None, SELECTOR, None, SELECTOR]
    assert {h["failurePolicy"] for h in hooks} == {"Fail"}


def test_a_patch_that_is_not_a_replace_of_one_webhook_is_refused(share: Path, tmp_path: Path) -> None:
    (share / "validating-patch.yaml").write_text(
        yaml.safe_dump([{"op": "add", "path": "/webhooks/-", "value": {"name": "extra"}}])
    )
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"plane CA")
    with pytest.raises(ValueError, match="add /webhooks/-: not a replace of /webhooks/<i>"):
        jobset.webhook_configurations(46245, ca)
