"""Every kind gpuwarden handles, one module each defining its spec (`spec.KindSpec`), and the one
registry of them (`registry`): docs/architecture.md, "Kinds"."""
