"""Kubernetes resource quantities ("8", "16", "1k", "500m", "2Gi", "1e3") as exact numbers.

The grammar is the API server's (``k8s.io/apimachinery/pkg/api/resource``): a signed decimal
number, then a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix (n u m k M G T P E) or a
decimal exponent (e3, E-2). A JSON integer is a quantity too (CRDs with
``x-kubernetes-int-or-string`` accept both). Numbers compare as numbers: "1k" > "16".
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["QUANTITY_PATTERN", "format_quantity", "parse_quantity"]

#: The pattern Karpenter's CRDs (and the API server) require of a quantity string.
QUANTITY_PATTERN = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_NUMBER = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: object) -> Fraction | None:
    """The exact value of a quantity, or None when ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, str) or not QUANTITY_PATTERN.match(value):
        return None
    match = _NUMBER.match(value)
    if match is None:  # pragma: no cover - the pattern above guarantees a number
        return None
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    exponent = _DECIMAL.get(suffix)
    if exponent is None:  # an exponent such as e3 or E-2
        exponent_value = Fraction(suffix[1:])
        if exponent_value.denominator != 1:
            return None
        exponent = int(exponent_value)
    return number * Fraction(10) ** exponent


def format_quantity(amount: Fraction, *, binary: bool = False) -> str:
    """A quantity the API server reads back as ``amount``: a whole number plain (with the largest
    exact binary suffix when ``binary``: ``128Gi``), else in thousandths (``1500m``), else rounded up
    to billionths (``n``), as the API server itself rounds."""
    if amount.denominator == 1:
        whole = int(amount)
        if binary and whole:
            for suffix, size in sorted(_BINARY.items(), key=lambda item: -item[1]):
                if whole % size == 0:
                    return f"{whole // size}{suffix}"
        return str(whole)
    milli = amount * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return f"{-(-amount.numerator * 10**9 // amount.denominator)}n"
