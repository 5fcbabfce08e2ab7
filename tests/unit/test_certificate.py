"""When a certificate expires, read as openssl reads it (`openssl x509 -enddate`, the oracle): a
self-signed one, a CA-signed serving one as certificate.sh makes them (a chain in one PEM: the first is
the one served), and what is not a certificate is refused with a clear error."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.core.certificate import CertificateError, expires_at
from controlplane.seed import REPO_ROOT


def openssl_end(pem: Path) -> datetime:
    out = subprocess.run(
        ["openssl", "x509", "-in", str(pem), "-noout", "-enddate"], capture_output=True, text=True, check=True
    ).stdout
    return datetime.strptime(out.strip().removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z").replace(
        tzinfo=UTC
    )


def test_the_serving_certificate_the_install_script_makes_and_the_first_of_a_chain(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(REPO_ROOT / "manifests" / "webhook" / "certificate.sh"), str(tmp_path)],
        capture_output=True,
        check=True,
    )
    served = tmp_path / "tls.crt"
    assert expires_at(served.read_bytes()) == openssl_end(served)
    # A 10-day certificate ahead of the script's 365-day CA in one PEM: the first one's end is read.
    short = tmp_path / "short.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "10", "-subj", "/CN=t"),
            *("-keyout", str(tmp_path / "short.key"), "-out", str(short)),
        ],
        capture_output=True,
        check=True,
    )
    chain = short.read_bytes() + (tmp_path / "ca.crt").read_bytes()
    assert expires_at(chain) == openssl_end(short)
    assert openssl_end(short) < openssl_end(tmp_path / "ca.crt")


@pytest.mark.parametrize(
    "pem",
    [
        b"",
        b"-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n",  # SEQUENCE { INTEGER 1 }
        b"-----BEGIN CERTIFICATE-----\nMIIBCg==\n-----END CERTIFICATE-----\n",  # a length past the end
    ],
)
def test_what_is_not_a_certificate_is_refused(pem: bytes) -> None:
    with pytest.raises(CertificateError):
        expires_at(pem)
