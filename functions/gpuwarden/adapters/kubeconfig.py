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
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError, ValueError, TypeError) as err:
        raise cluster_unreachable(f"from KUBECONFIG {path}", err) from err
    configuration.connection_pool_maxsize = 32
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = _at_most_every(hook, KUBECONFIG_REFRESH_SECONDS)
    return client.ApiClient(configuration)


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
