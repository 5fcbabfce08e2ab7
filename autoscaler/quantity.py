"""Kubernetes resource quantities: parse to millicores and MiB, format back. Pure."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
}


class QuantityError(ValueError):
    pass


def parse(value: str | int | float) -> Fraction:
    """A quantity in base units (cores, bytes)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(value)
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _SUFFIX:
        raise QuantityError(f"not a quantity: {value!r}")
    return Fraction(match.group(1)) * _SUFFIX[match.group(2)]


def millicores(value: str | int | float) -> int:
    """CPU in millicores, rounded up (the API server rounds sub-milli CPU up too)."""
    return math.ceil(parse(value) * 1000)


def mebibytes(value: str | int | float) -> int:
    """Memory in MiB, rounded up."""
    return math.ceil(parse(value) / 2**20)


def format_cpu(millis: int) -> str:
    return f"{millis}m"


def format_memory(mib: int) -> str:
    return f"{mib}Mi"
