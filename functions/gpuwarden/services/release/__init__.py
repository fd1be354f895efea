"""The release use case: every mark gpuwarden left on the cluster taken back (docs/rollback.md)."""
