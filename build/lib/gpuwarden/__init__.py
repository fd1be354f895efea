"""gpuwarden: event-driven protection of GPU nodes on EKS."""

__version__ = "0.1.0"
