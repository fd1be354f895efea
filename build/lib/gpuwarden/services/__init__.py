"""Use cases: they talk to the world only through the ports in `domain.ports`."""
