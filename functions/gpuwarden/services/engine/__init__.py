"""The engine every use case shares: the one disruption pipeline and the steps it runs."""
