"""The actors that act on the simulated API server as the real ones act on a cluster:
Karpenter's controllers, the workload controllers, the trainers' side of the checkpoint handshake,
and EC2's Capacity Reservations."""
