"""The doctor use case: what gpuwarden needs from the cluster, and what would fight it."""
