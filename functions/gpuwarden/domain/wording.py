"""Counts in prose: `1 pod`, `3 pods`, `1 is`, `2 are` (what a person reads in a reason)."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 pod`, `2 pods`; ``plural`` where adding an s is wrong."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def are(n: int) -> str:
    """`1 is`, `2 are`."""
    return f"{n} {'is' if n == 1 else 'are'}"
