"""Session-wide test plugins: tests/replay.py (seed, notes and artifacts of failed long tests)."""

pytest_plugins = ["tests.replay"]
