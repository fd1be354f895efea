"""What the GPU function records of the alerts it received, and how doctor judges them
(domain/alerts_received.py; docs/gpu-signals.md, "Checking the node label on the alerts actually received")."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuwarden.domain.alerts import Alert
from gpuwarden.domain.alerts_received import MAX_TARGETS, received, unknown
from gpuwarden.domain.views import NodeView

AT = datetime(2026, 11, 24, 11, 41, 48, tzinfo=UTC)
NODES = [NodeView("ip-10-0-1-23.us-west-2.compute.internal", "1", provider_id="aws:///us-west-2a/i-0abc1234def567890")]


def alert(name: str, status: str = "firing", **labels: str) -> Alert:
    return Alert(name=name, status=status, labels=labels)


def test_firing_alerts_are_kept_by_name_with_the_label_that_names_their_node() -> None:
    records = received(
        [
            alert("LowGPUUtilization", Hostname="dcgm-exporter-x7k2p", kubernetes_node="ip-10-0-1-23"),
            alert("LowGPUUtilization", Hostname="dcgm-exporter-x7k2p", gpu="1"),
            alert("GPUXidError", instance_id="i-0abc1234def567890"),
            alert("GPUXidError", status="resolved", Hostname="gone"),
        ],
        AT,
    )
    assert [(r.name, r.targets) for r in records] == [
        ("GPUXidError", ("instance_id=i-0abc1234def567890",)),
        ("LowGPUUtilization", ("Hostname=dcgm-exporter-x7k2p",)),  # Hostname first, as the alert path reads it
    ]
    assert records[0].received_at == AT.isoformat()


def test_a_label_naming_no_node_is_found_and_an_instance_id_is_matched_by_the_providerid() -> None:
    records = received(
        [alert("GPUXidError", instance_id="i-0abc1234def567890"), alert("LowGPUUtilization", Hostname="10.0.1.23")],
        AT,
    )
    mapped = {"GPUXidError": "gpu-unhealthy", "LowGPUUtilization": "gpu-idle"}
    assert unknown(records, mapped, NODES) == ["LowGPUUtilization: Hostname=10.0.1.23"]
    assert unknown(records, {"GPUXidError": "gpu-unhealthy"}, NODES) == []  # an unmapped alert is not judged


def test_one_notification_keeps_at_most_a_bounded_number_of_labels() -> None:
    many = [alert("LowGPUUtilization", Hostname=f"node-{i}") for i in range(MAX_TARGETS + 5)]
    (record,) = received(many, AT)
    assert len(record.targets) == MAX_TARGETS
