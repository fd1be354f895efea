"""The compact JSON the server sends for each stored version of an object, encoded once.

A write never changes a stored object in place: it stores a new one with a new resourceVersion (one
counter for the whole store, `Store._bump`). So a version's JSON is fixed, and a list that sends the
same unchanged nodes again and again (gpuwarden's GPU-idle guard lists every node at each alarm: 740
of them in the week at ten times the cluster, docs/simulate.md#at-ten-times-the-cluster) encodes
each version once instead of at every request."""

from __future__ import annotations

from sim.apiserver.store import Obj
from sim.apiserver.store import encoded as encoded  # the one encoding (a test counts its calls here)

#: versions kept: more than the objects of the largest simulated cluster (740 nodes, their
#: NodeClaims and pods); the oldest goes first
KEEP = 16384


class Encodings:
    """`encoded`, remembered per resourceVersion. Called under the store's lock (`Store.list`'s render)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._by_version: dict[str, str] = {}

    def __call__(self, obj: Obj) -> str:
        version = str(obj["metadata"]["resourceVersion"])
        text = self._by_version.get(version)
        if text is None:
            text = self._by_version[version] = encoded(obj)
            if len(self._by_version) > self.keep:
                del self._by_version[next(iter(self._by_version))]
        return text
