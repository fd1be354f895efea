"""The budget-windows use case: windows kept in step with Karpenter's NodePools."""
