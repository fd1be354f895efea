"""The real control plane a test or the demo starts (`harness`: `Plane`), by concern: its processes
(`process`), PKI (`certs`), etcd and the Kubernetes programs (`control_plane`), KWOK (`kwok`),
Karpenter (`karpenter`), objects as JSON for assertion messages (`dumps`)."""
