"""An ApiClient from a kubeconfig file: local runs, the simulator, clusters other than EKS
(deployed, `eks_auth` builds the client from the function's role)."""

from __future__ import annotations

import math
from collections.abc import Callable
from time import monotonic
from typing import Any

from gpuwarden.adapters.errors import cluster_unreachable


def client_from_kubeconfig(path: str, context: str | None = None) -> Any:
    """An ApiClient for a kubeconfig file (local runs, the simulator, non-EKS clusters)."""
    import yaml
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context or first_current_context(path), client_configuration=configuration
        )
    except (config.ConfigException, OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as err:
        raise cluster_unreachable(f"from KUBECONFIG {path}", err) from err
    configuration.connection_pool_maxsize = 32
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = _at_most_every(hook, KUBECONFIG_REFRESH_SECONDS)
    return client.ApiClient(configuration)


def first_current_context(paths: str) -> str | None:
    """KUBECONFIG with several paths (docs/policy.md), merged as kubectl merges them: the
    client's KubeConfigMerger already keeps the first file's cluster, context and user of each
    name, and skips files that do not exist; but it takes ``current-context`` from the LAST file
    that sets it, kubectl from the FIRST. The first one, then, passed as the context to use."""
    import os

    import yaml

    found = [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]
    existing = [p for p in found if os.path.exists(p)]
    if not existing:
        raise FileNotFoundError(f"none of the files exists: {', '.join(found) or '(empty)'}")
    if len(existing) == 1:
        return None
    for path in existing:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        if isinstance(document, dict) and document.get("current-context"):
            return str(document["current-context"])
    return None


#: How often the kubeconfig loader's token hook runs. It re-applies every setting of the file
#: (the host setter reads the proxy environment each time) and renews a token five minutes
#: before it expires, so running it once a minute rather than before every request loses nothing.
KUBECONFIG_REFRESH_SECONDS = 60.0


def _at_most_every(hook: Callable[[Any], None], seconds: float) -> Callable[[Any], None]:
    last = -math.inf

    def refresh(configuration: Any) -> None:
        nonlocal last
        if monotonic() - last >= seconds:
            hook(configuration)
            configuration.refresh_api_key_hook = refresh  # the loader's hook puts itself back each time
            last = monotonic()

    return refresh
