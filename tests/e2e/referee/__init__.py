"""The referee: the simulator and the real API server / real Karpenter asked the same questions,
and the same scene built on both (docs/realplane.md)."""
