"""The runbook use case: one action on one node, asked for by a person or a script."""
