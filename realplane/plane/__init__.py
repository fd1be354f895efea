"""The real control plane a test or the demo starts: its processes, PKI (`certs`), etcd and
kube-apiserver, KWOK and Karpenter (`harness`: `Plane`)."""
