"""The harness itself: a port taken between its pick and the component's bind is picked again
(docs/realplane.md, "How the plane runs")."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from kubernetes import client

from realplane.plane.harness import Plane


def test_a_port_taken_before_the_bind_is_picked_again(tmp_path: Path) -> None:
    # Given a plane whose API server and etcd ports another process holds by the time they start
    plane = Plane(artifacts=tmp_path / "artifacts", karpenter=False)
    taken = {name: plane.ports[name] for name in ("etcd", "apiserver")}
    holders = []
    for port in taken.values():
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        holders.append(holder)
    try:
        # When it starts
        with plane:
            # Then both run on other ports, and the kubeconfigs point at the API server's new one
            assert all(plane.ports[name] != port for name, port in taken.items())
            assert f":{plane.ports['apiserver']}" in plane.kubeconfig.read_text()
            core: Any = client.CoreV1Api(plane.api_client())
            names = {ns.metadata.name for ns in core.list_namespace().items}
            assert "kube-system" in names
    finally:
        for holder in holders:
            holder.close()
    # and the logs tell why
    assert "address already in use" in (tmp_path / "artifacts" / "etcd.log").read_text()
