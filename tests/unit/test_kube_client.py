"""`adapters.kube_client`: the deployed path imports `kubernetes.client` without the package's
``__init__`` (kubernetes.config and the rest stay unloaded), and what the local path needs still
imports (docs/benchmarks.md, "Cold start"). Each check in a fresh interpreter: the test process has
imported the whole package already. Measure, don't time: which modules are loaded, not how long."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from gpuwarden.adapters.kube_client import kubernetes_client
client = kubernetes_client()
loaded = sorted(m for m in ("kubernetes.config", "kubernetes.dynamic", "kubernetes.watch", "kubernetes.utils",
                            "kubernetes.leaderelection", "kubernetes.informer", "kubernetes.stream",
                            "oauthlib", "requests_oauthlib") if m in sys.modules)
made = type(client.ApiClient(client.Configuration())).__name__
from kubernetes import config
from kubernetes.stream.ws_client import websocket_call
print(json.dumps({"loaded": loaded, "made": made, "config": hasattr(config, "load_kube_config")}))
"""


def test_the_client_comes_without_the_rest_of_the_package_which_still_imports_where_needed() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer == {"loaded": [], "made": "ApiClient", "config": True}


def test_a_package_imported_whole_is_used_as_it_is() -> None:
    probe = "import kubernetes\nfrom gpuwarden.adapters.kube_client import kubernetes_client\n"
    probe += "print(kubernetes_client() is kubernetes.client, hasattr(kubernetes, '__version__'))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert proc.stdout.split() == ["True", "True"]
