"""Research, not part of the suite: Karpenter's AWS provider (v1.14.1, built from the Go module
proxy) against moto's EC2/SQS/IAM/EKS and the real plane (no KWOK Karpenter), racing gpuwarden for
one Spot warning (docs/realplane.md, "Karpenter's AWS provider against moto"). From the repository's
root, with the real plane built (`make setup-real`):

    (cd research/karpenter-aws-provider && go build -trimpath -o controller \
        github.com/aws/karpenter-provider-aws/cmd/controller)
    .venv/bin/python research/karpenter-aws-provider/race.py PHASE     # DND=1: the trainer do-not-disrupt

Phases: start (the controller against moto: what its start-up calls do), launch (a NodePool on an
EC2NodeClass by ids, a pending pod: does it CreateFleet in moto; the kubelet stand-in registers a
Node for the instance), interrupt (a Spot warning on the SQS queue: what Karpenter's interruption
controller does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from realplane.aws import start_moto
from realplane.plane.harness import Plane
from realplane.plane.kwok import KWOK_NODE_ANNOTATION
from realplane.plane.process import free_port

KPA = Path(__file__).resolve().parent
ROOT = KPA.parents[1]
CRDS = (
    Path(subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip())  # noqa: S607 - the go on PATH
    / "github.com/aws/karpenter-provider-aws@v1.14.1/pkg/apis/crds"
)
QUEUE = "karpenter-interruptions"
REGION = "us-west-2"
KUBECONFIG: list[str] = []
ENDPOINT: list[str] = []
PLANE: list[Plane] = []


def artifacts_dir() -> Path:
    return ROOT / "test-artifacts" / "karpenter-aws-provider"


def install_crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for path in sorted(CRDS.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
    time.sleep(3)


def kubelet_stand_in(api: client.ApiClient, ec2, stop: threading.Event, log: list[str]) -> None:
    """A kubelet stand-in: for every NodeClaim with a providerID and no Node, register the Node
    (its name the instance's private DNS name, the providerID, the claim's labels and taints,
    KWOK's annotation so KWOK makes it Ready)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    while not stop.wait(0.5):
        try:
            claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
            nodes = {n.spec.provider_id for n in core.list_node().items}
            for claim in claims:
                pid = claim.get("status", {}).get("providerID")
                if not pid or pid in nodes:
                    continue
                instance = pid.rsplit("/", 1)[-1]
                described = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
                name = described.get("PrivateDnsName") or instance
                labels = dict(claim["metadata"].get("labels", {}))
                labels |= {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
                body = {
                    "metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE_ANNOTATION: "fake"}},
                    "spec": {
                        "providerID": pid,
                        "taints": claim["spec"].get("taints", []) + claim["spec"].get("startupTaints", []),
                    },
                    "status": {
                        "capacity": claim.get("status", {}).get("capacity", {}),
                        "allocatable": claim.get("status", {}).get("allocatable", {}),
                    },
                }
                core.create_node(body)
                log.append(f"{time.strftime('%H:%M:%S')} stand-in registered {name} for {pid}")
        except Exception as err:
            log.append(f"{time.strftime('%H:%M:%S')} stand-in: {type(err).__name__}: {str(err)[:300]}")


def main(phase: str) -> None:
    artifacts = ROOT / "test-artifacts" / "karpenter-aws-provider"
    artifacts.mkdir(parents=True, exist_ok=True)
    with start_moto() as aws, Plane(artifacts=artifacts, karpenter=False) as plane:
        import boto3

        kw = {
            "endpoint_url": aws.endpoint,
            "region_name": REGION,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        }
        ec2, sqs = boto3.client("ec2", **kw), boto3.client("sqs", **kw)
        queue_url = sqs.create_queue(QueueName=QUEUE)["QueueUrl"]
        # what a user's account has before installing Karpenter: the node role, the EKS cluster
        iam, eks = boto3.client("iam", **kw), boto3.client("eks", **kw)
        assume = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(RoleName="KarpenterNodeRole-ml-prod", AssumeRolePolicyDocument=json.dumps(assume))[
            "Role"
        ]["Arn"]
        subnet_ids = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"][:3]]
        eks.create_cluster(name="ml-prod", roleArn=role, resourcesVpcConfig={"subnetIds": subnet_ids})
        api = plane.api_client()
        install_crds(api)
        KUBECONFIG.append(str(plane.kubeconfig_for("gpuwarden")))
        ENDPOINT.append(aws.endpoint)
        PLANE.append(plane)
        env = {
            **os.environ,
            "KUBECONFIG": str(plane.kubeconfig_for("karpenter")),
            "CLUSTER_NAME": "ml-prod",
            "CLUSTER_ENDPOINT": plane.server,
            "AWS_ENDPOINT_URL": aws.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "INTERRUPTION_QUEUE": QUEUE,
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(free_port()),
            "LOG_LEVEL": "debug",
            "SYSTEM_NAMESPACE": "kube-system",
            "BATCH_MAX_DURATION": "2s",
            "BATCH_IDLE_DURATION": "1s",
        }
        log_path = artifacts / f"aws-karpenter.{phase}.log"
        with log_path.open("wb") as out:
            proc = subprocess.Popen([str(KPA / "controller")], env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - built here
            stand_in_log: list[str] = []
            stop = threading.Event()
            try:
                time.sleep(30)
                print("controller alive after 30 s:", proc.poll() is None)
                if phase in ("launch", "interrupt") and proc.poll() is None:
                    launch(api, ec2, stop, stand_in_log, aws.endpoint)
                if phase == "interrupt" and proc.poll() is None:
                    interrupt(api, ec2, sqs, queue_url)
            finally:
                stop.set()
                proc.terminate()
                proc.wait(timeout=20)
        print("\n".join(stand_in_log[-20:]))
        print("log:", log_path)


def launch(api, ec2, stop, stand_in_log, endpoint) -> None:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    subnets = ec2.describe_subnets()["Subnets"]
    groups = ec2.describe_security_groups()["SecurityGroups"]
    image = ec2.describe_images()["Images"][0]["ImageId"]
    nodeclass = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-ml-prod",
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"id": image}],
            "subnetSelectorTerms": [{"id": s["SubnetId"]} for s in subnets[:3]],
            "securityGroupSelectorTerms": [{"id": groups[0]["GroupId"]}],
        },
    }
    custom.create_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", nodeclass)
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {
                            "key": "node.kubernetes.io/instance-type",
                            "operator": "In",
                            "values": ["m5.large", "m5.xlarge"],
                        },
                    ],
                }
            },
            "disruption": {"consolidateAfter": "Never", "consolidationPolicy": "WhenEmpty"},
        },
    }
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool)
    time.sleep(15)
    print(
        "EC2NodeClass status:",
        json.dumps(
            custom.get_cluster_custom_object("karpenter.k8s.aws", "v1", "ec2nodeclasses", "default")
            .get("status", {})
            .get("conditions"),
            indent=1,
        )[:3000],
    )
    core.create_namespace({"metadata": {"name": "work"}})
    labels = {"app": "trainer"}
    deployment = {
        "metadata": {"name": "trainer", "namespace": "work"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"gpuwarden.io/checkpoint": "annotate"}
                    | ({"karpenter.sh/do-not-disrupt": "true"} if os.environ.get("DND") else {}),
                },
                "spec": {
                    "containers": [
                        {"name": "main", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
                    ]
                },
            },
        },
    }
    client.AppsV1Api(api).create_namespaced_deployment("work", deployment)
    threading.Thread(target=kubelet_stand_in, args=(api, ec2, stop, stand_in_log), daemon=True).start()
    for _ in range(60):
        time.sleep(2)
        claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
        pods = core.list_namespaced_pod("work", label_selector="app=trainer").items
        if pods and pods[0].spec.node_name:
            break
    print(
        "NodeClaims:",
        json.dumps(
            [
                {
                    "name": c["metadata"]["name"],
                    "providerID": c.get("status", {}).get("providerID"),
                    "conditions": [
                        (x["type"], x["status"], x.get("reason")) for x in c.get("status", {}).get("conditions", [])
                    ],
                }
                for c in claims
            ],
            indent=1,
        ),
    )
    print(
        "pod bound to:",
        [p.spec.node_name for p in core.list_namespaced_pod("work", label_selector="app=trainer").items],
    )
    print(
        "instances:",
        [
            (i["InstanceId"], i["InstanceType"], i.get("InstanceLifecycle"), i["State"]["Name"])
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ],
    )


def interrupt(api, ec2, sqs, queue_url) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
    if not claims or not claims[0].get("status", {}).get("providerID"):
        print("no launched claim: nothing to interrupt")
        return
    name = claims[0]["metadata"]["name"]
    for _ in range(60):  # Karpenter's registration and initialization of the stand-in's Node
        claim = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
        if any(
            c["type"] == "Initialized" and c["status"] == "True" for c in claim.get("status", {}).get("conditions", [])
        ):
            break
        time.sleep(1)
    print("claim conditions before the warning:", [(c["type"], c["status"]) for c in claim["status"]["conditions"]])
    pid = claims[0]["status"]["providerID"]
    instance = pid.rsplit("/", 1)[-1]
    event = json.loads(ROOT / "events" / "spot-interruption.json".read_text())
    event["detail"]["instance-id"] = instance
    event["resources"] = [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance}"]
    event["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = artifacts_dir() / "warning.json"
    path.write_text(json.dumps(event))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG"))}
    env |= {
        "KUBECONFIG": KUBECONFIG[0],
        "AWS_ENDPOINT_URL": ENDPOINT[0],
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "GPUWARDEN_CLUSTER": "ml-prod",
    }
    from tests.e2e.scene import Acknowledger

    with Acknowledger(PLANE[0], "work", "app=trainer", takes=lambda _: 5.0):
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(event))
        print("sent Spot warning for", instance, "to Karpenter's queue and gpuwarden at", time.strftime("%H:%M:%S"))
        gw = subprocess.Popen(  # noqa: S603 - the venv's gpuwarden
            [str(Path(sys.executable).with_name("gpuwarden")), "invoke", str(path)],
            env=env,
            stdout=(artifacts_dir() / "gpuwarden.out").open("w"),
            stderr=(artifacts_dir() / "gpuwarden.err").open("w"),
        )
        watch(core, custom)
        gw.wait(timeout=200)
    print("gpuwarden:", (artifacts_dir() / "gpuwarden.out").read_text()[:3000])


def watch(core, custom) -> None:
    for _ in range(40):
        time.sleep(1)
        nodes = core.list_node().items
        state = [
            (
                n.metadata.name,
                n.spec.unschedulable,
                [t.key for t in (n.spec.taints or [])],
                bool(n.metadata.deletion_timestamp),
            )
            for n in nodes
        ]
        claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
        summary = [
            (
                c["metadata"]["name"],
                c["metadata"].get("labels", {}).get("karpenter.sh/nodepool"),
                bool(c["metadata"].get("deletionTimestamp")),
            )
            for c in claims
        ]
        pods = [
            (
                p.metadata.name,
                p.spec.node_name,
                bool(p.metadata.deletion_timestamp),
                (p.metadata.annotations or {}).get("karpenter.sh/do-not-disrupt"),
            )
            for p in core.list_namespaced_pod("work").items
        ]
        print(time.strftime("%H:%M:%S"), "nodes", state, "claims", summary, "pods", pods)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "start")
