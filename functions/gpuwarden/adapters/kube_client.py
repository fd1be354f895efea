"""`kubernetes.client` without the rest of the official client's package (docs/benchmarks.md,
"Cold start").

``kubernetes/__init__.py`` imports every subpackage: `kubernetes.config` (kubeconfig loading, with
requests-oauthlib and yaml), `dynamic`, `watch`, `stream`, `utils`, `leaderelection`, `informer`.
A deployed function reaches EKS with a token and uses only `kubernetes.client` (and, for exec,
`kubernetes.stream`), so it registers the package by its import spec without running that
``__init__``: each subpackage is then imported only where it is used (`from kubernetes import
config` still works, as a submodule import). Where the package was imported whole already, it is
used as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

PACKAGE = "kubernetes"


def kubernetes_client() -> ModuleType:
    """The `kubernetes.client` module, its package registered without its ``__init__`` first."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"the {PACKAGE} package is not installed")
        sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)  # its __path__ set, its code not run
    return importlib.import_module(f"{PACKAGE}.client")
