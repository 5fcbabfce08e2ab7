"""When a PEM certificate expires: its `notAfter`, read from the DER of the first certificate in the PEM.
Pure. The webhook shows it on /metrics (the certificate it serves, as loaded), so an alert can fire before
the API server stops trusting it; Python's `ssl` loads a certificate but does not say when it expires, and
reading one field is not worth a cryptography library in the image.

X.509 (RFC 5280, 4.1): Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
serialNumber INTEGER, signature AlgorithmIdentifier, issuer Name, validity SEQUENCE { notBefore Time,
notAfter Time }, ... }, ... }; a Time is a UTCTime (YYMMDDHHMMSSZ; years 50 to 99 are 19YY) or a
GeneralizedTime (YYYYMMDDHHMMSSZ).
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
_SEQUENCE, _INTEGER, _VERSION, _UTC_TIME, _GENERALIZED_TIME = 0x30, 0x02, 0xA0, 0x17, 0x18


class CertificateError(ValueError):
    """The PEM holds no certificate whose expiry can be read."""


def expires_at(pem: bytes) -> datetime:
    """The `notAfter` of the first certificate in `pem` (UTC)."""
    found = _PEM.search(pem)
    if found is None:
        raise CertificateError("no PEM certificate")
    try:
        der = base64.b64decode(b"".join(found[1].split()), validate=True)
    except binascii.Error as error:
        raise CertificateError(f"the certificate is not base64: {error}") from error
    try:
        return _not_after(der)
    except (IndexError, ValueError) as error:
        raise CertificateError(f"not an X.509 certificate: {error}") from error


def _not_after(der: bytes) -> datetime:
    tag, start, _ = _element(der, 0)
    _expect(tag, _SEQUENCE, "the certificate")
    tag, at, _ = _element(der, start)
    _expect(tag, _SEQUENCE, "tbsCertificate")
    tag, _, end = _element(der, at)
    if tag == _VERSION:
        tag, _, end = _element(der, end)
    _expect(tag, _INTEGER, "serialNumber")
    for name in ("signature", "issuer"):
        tag, _, end = _element(der, end)
        _expect(tag, _SEQUENCE, name)
    tag, at, _ = _element(der, end)
    _expect(tag, _SEQUENCE, "validity")
    _, _, after_not_before = _element(der, at)
    tag, start, end = _element(der, after_not_before)
    text = der[start:end].decode("ascii")
    if tag == _UTC_TIME:
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != _GENERALIZED_TIME:
        raise ValueError(f"notAfter is tagged {tag:#x}, not a time")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at `at`: its tag, where its content starts and where it ends."""
    tag, length = der[at], der[at + 1]
    start = at + 2
    if length & 0x80:  # the long form: the next (length & 0x7f) bytes hold the length
        count = length & 0x7F
        length, start = int.from_bytes(der[start : start + count], "big"), start + count
    if start + length > len(der):
        raise ValueError("an element runs past the end")
    return tag, start, start + length


def _expect(tag: int, wanted: int, what: str) -> None:
    if tag != wanted:
        raise ValueError(f"{what} is tagged {tag:#x}, not {wanted:#x}")
