"""`gpuwarden release`: the way back (docs/rollback.md)."""
