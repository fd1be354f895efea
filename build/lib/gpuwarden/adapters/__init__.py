"""The edges: Kubernetes, AWS, the ledger. The only place that imports client libraries."""
