"""Use cases for notices of loss and disruption, one module per family.

Each imports the engine, never another use case."""
