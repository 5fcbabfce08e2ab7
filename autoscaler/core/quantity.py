"""Kubernetes resource quantities: parse to millicores and MiB, format back. Pure."""

from __future__ import annotations

import math
import re
from fractions import Fraction

# Kubernetes' quantity grammar: a decimal number (optionally with an exponent) and a suffix. Longer
# than any real quantity is refused before parsing, so a hostile value costs nothing.
_QUANTITY = re.compile(
    r"^\+?((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
)
MIB = 2**20  # bytes
_MAX_LENGTH = 64
_MAX_VALUE = 2**63 - 1
_SUFFIX = {
    None: Fraction(1),
    "n": Fraction(1, 10**9),  # the metrics API reports CPU usage in nanocores
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(MIB),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


class QuantityError(ValueError):
    pass


def parse(value: object) -> Fraction:
    """A non-negative quantity in base units (cores, bytes); QuantityError for anything else."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0 or value > _MAX_VALUE:
            raise QuantityError(f"not a quantity: {value!r}")
        return Fraction(value)
    match = _QUANTITY.match(value.strip()) if len(value) <= _MAX_LENGTH else None
    if not match:
        raise QuantityError(f"not a quantity: {value[:_MAX_LENGTH]!r}")
    parsed = Fraction(match.group(1)) * _SUFFIX[match.group(2)]
    if parsed > _MAX_VALUE:
        raise QuantityError(f"quantity {value!r} is larger than Kubernetes allows (2^63-1)")
    return parsed


def millicores(value: object) -> int:
    """CPU in millicores, rounded up (the API server rounds sub-milli CPU up too)."""
    return math.ceil(parse(value) * 1000)


def mebibytes(value: object) -> int:
    """Memory in MiB, rounded up."""
    return mib_up(parse(value))


def mib_up(size: Fraction | int) -> int:
    """`size` bytes in whole MiB, rounded up."""
    return math.ceil(Fraction(size) / MIB)


def format_cpu(millis: int) -> str:
    return f"{millis}m"


def format_memory(mib: int) -> str:
    return f"{mib}Mi"
