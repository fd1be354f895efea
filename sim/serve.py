"""`gpuwarden demo --serve`: a sandbox to try `doctor`, `runbook`, `invoke`, `scan` and `release`
by hand (docs/cli.md#demo): the demo's cluster on the simulated API server (Karpenter stand-in,
workloads and the ReplicaSet controller included) and moto in server mode, reachable from other
processes; the `export` lines on stdout; up until Ctrl-C (SIGINT) or SIGTERM."""

from __future__ import annotations

import json
import shlex
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

from sim.actors.controllers import ReplicaSetReplacer
from sim.actors.karpenter import Karpenter
from sim.actors.workloads import Workloads
from sim.apiserver.core import KubeSim
from sim.scenes.base import TRAINIUM_NODE, build_cluster, build_trainium
from sim.seeds import seed_cluster

REGION = "us-west-2"
CLUSTER = KubeSim.cluster_name  # its kubeconfig names it: the policy must too


def exports(kubeconfig: Path, policy: Path, endpoint: str) -> dict[str, str]:
    """The environment a shell needs to reach the sandbox."""
    return {
        "KUBECONFIG": str(kubeconfig),
        "GPUWARDEN_POLICY_FILE": str(policy),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }


#: What this sandbox is not, said when it starts: `kubectl apply` is accepted (the OpenAPI it reads is
#: served), but nothing turns a Job into pods or puts a pod on a node.
NO_CONTROLLERS = (
    "# a simulator: no scheduler and no Job, JobSet or Deployment controller run here (kubectl apply is accepted,"
    " but a Job makes no pods and a new pod stays Pending); for your own manifests: gpuwarden demo --serve --real"
)


def serve(speed: float = 1.0, seeds: bool = False) -> int:
    """``seeds``: the seed articles' manifests (sim/seeds/, docs/protections.md) instead of the demo's cluster."""
    from moto.server import ThreadedMotoServer

    stop = threading.Event()

    def stopped(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, stopped) for s in (signal.SIGINT, signal.SIGTERM)}
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        with tempfile.TemporaryDirectory(prefix="gpuwarden-sandbox-") as tmp, KubeSim(clock_speed=speed) as sim:
            node = "ip-10-0-1-23.us-west-2.compute.internal"
            if seeds:
                made = seed_cluster(sim)
                node = made.node_of[made.training_ranks()[0]]
            else:
                build_cluster(sim)
                build_trainium(sim)  # a Trainium pool, and a rank with a zonal EBS checkpoint volume
            Workloads(sim, delay=6.0).install()
            karpenter = Karpenter(sim, interruption_queue=False).start()
            ReplicaSetReplacer(sim)
            policy = Path(tmp) / "policy.yaml"
            policy.write_text(json.dumps({"cluster": CLUSTER}, indent=2) + "\n")
            endpoint = f"http://127.0.0.1:{moto.get_host_and_port()[1]}"
            env = exports(sim.kubeconfig_path, policy, endpoint)
            what = "the seed articles' manifests" if seeds else "the demo's cluster"
            print(f"# gpuwarden sandbox: {what} (simulated API server, Karpenter stand-in) and moto")
            print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()), flush=True)
            print(f"# then: gpuwarden doctor; gpuwarden runbook plan --node {node};")
            if not seeds:
                print(f"#       gpuwarden runbook plan --node {TRAINIUM_NODE}  (Trainium, EFA, a zonal volume);")
            print(
                "#       gpuwarden invoke events/spot-interruption-empty-time.json (a Spot warning stamped on"
                " arrival: the Spot scene); gpuwarden release --all. Ctrl-C stops.",
                flush=True,
            )
            print(NO_CONTROLLERS, flush=True)
            stop.wait()
            karpenter.stop()
    finally:
        moto.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("# sandbox stopped", flush=True)
    return 0
