"""The Kubernetes API server the simulator plays: store, API semantics, admission, HTTP.

It knows no actor: Karpenter, the kubelet and the workloads act on it through its API (sim.actors)."""
