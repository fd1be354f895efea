"""JobSet's controller on the plane (``Plane(jobset=True)``; docs/realplane.md, "JobSet").

The pinned module's own main (``sigs.k8s.io/jobset``, main.go) runs with a configuration file
(``config.jobset.x-k8s.io/v1alpha1``) that turns off what needs a cluster around it: leader
election, and its internal certificate management (``internalCertManagement.enable: false``:
main.go then closes ``certsReady`` at once instead of starting cert-controller's rotator, which
writes a Secret and patches the webhook configurations in the jobset-system namespace).

Its webhooks are served and registered, not skipped: the JobSet defaulting webhook is what sets
``startupPolicy``, ``successPolicy``, ``network``, a replicated Job's completion mode and restart
policy, and names the failure policy's rules (pkg/webhooks/jobset_webhook.go, ``Default``); the
controller reads those without the CRD's schema defaulting them. So the controller serves them on
127.0.0.1 with a certificate of the plane's CA, and the module's own webhook configurations
(config/components/webhook: manifests.yaml with the kustomize patches that give the pod webhooks
their objectSelector) are created with ``clientConfig.url`` pointing there instead of a Service.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from realplane.build import pins

#: What the build copied from config/components/webhook (pins.SHARE).
WEBHOOKS = "jobset-webhooks"
#: The ports the harness picks for it.
PORTS = ("jobset-webhook", "jobset-health", "jobset-metrics")
#: config/default/kustomization.yaml's namePrefix, as a kustomize install names them.
NAME_PREFIX = "jobset-"


def config(workdir: Path, ports: dict[str, int], cert_dir: Path) -> Path:
    """The controller's configuration file: every port on 127.0.0.1, picked free by the harness."""
    path = workdir / "jobset-config.yaml"
    body = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": ports["jobset-webhook"], "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['jobset-metrics']}", "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['jobset-health']}"},
    }
    path.write_text(yaml.safe_dump(body))
    return path


def argv(config_file: Path) -> list[str]:
    return ["jobset-controller", f"--config={config_file}", "--zap-log-level=info"]


def _patched(manifest: dict[str, Any], patches: list[dict[str, Any]]) -> dict[str, Any]:
    """The kustomize JSON patches of config/components/webhook/patches: each replaces one webhook
    (``/webhooks/<i>``). Any other operation is not what the pinned files hold: fail, do not guess."""
    done = copy.deepcopy(manifest)
    for patch in patches:
        op, path = patch.get("op"), str(patch.get("path", ""))
        parts = path.strip("/").split("/")
        if op != "replace" or len(parts) != 2 or parts[0] != "webhooks" or not parts[1].isdigit():
            raise ValueError(f"jobset webhook patch {op} {path}: not a replace of /webhooks/<i>")
        done["webhooks"][int(parts[1])] = patch["value"]
    return done


def webhook_configurations(port: int, ca_cert: Path) -> list[dict[str, Any]]:
    """The module's Mutating- and ValidatingWebhookConfiguration, patched as kustomize does, each
    webhook's Service replaced by the controller's URL on loopback with the plane's CA."""
    folder = pins.share_dir() / WEBHOOKS
    patches: dict[str, list[dict[str, Any]]] = {
        kind: yaml.safe_load((folder / f"{prefix}-patch.yaml").read_text())
        for kind, prefix in (
            ("MutatingWebhookConfiguration", "mutating"),
            ("ValidatingWebhookConfiguration", "validating"),
        )
    }
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    found = []
    for manifest in yaml.safe_load_all((folder / "manifests.yaml").read_text()):
        if not manifest:
            continue
        done = _patched(manifest, patches[manifest["kind"]])
        done["metadata"]["name"] = NAME_PREFIX + done["metadata"]["name"]
        for hook in done["webhooks"]:
            service_path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{service_path}", "caBundle": ca_bundle}
        found.append(done)
    return found


def install_webhooks(api: Any, port: int, ca_cert: Path) -> list[str]:
    """Create the webhook configurations; their names."""
    from kubernetes import client

    admission: Any = client.AdmissionregistrationV1Api(api)
    names = []
    for body in webhook_configurations(port, ca_cert):
        if body["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(body)
        else:
            admission.create_validating_webhook_configuration(body)
        names.append(body["metadata"]["name"])
    return names


def defaulted(api: Any) -> bool:
    """The API server calls the defaulting webhook: a dry-run JobSet comes back with the
    ``startupPolicy`` only the webhook sets (the CRD's schema has no default for it). The API
    server reads webhook configurations through an informer, so a new one is not in effect at once."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)
    probe = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "realplane-webhook-probe"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "probe",
                    "template": {"spec": {"template": {"spec": {"containers": [{"name": "probe", "image": "probe"}]}}}},
                }
            ]
        },
    }
    got = custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", probe, dry_run="All"
    )
    return bool(got.get("spec", {}).get("startupPolicy"))
