"""Self-signed TLS certificate for the DASH server (generated at run time)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _san(bind: str) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    try:
        addr = ipaddress.ip_address(bind)
    except ValueError:
        names.append(x509.DNSName(bind))
    else:
        if not addr.is_unspecified and not addr.is_loopback:
            names.append(x509.IPAddress(addr))
    return x509.SubjectAlternativeName(names)


def self_signed(bind: str, *, days: int = 2) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``bind``; the certificate is its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, "nest_experiments dash server")]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(_san(bind), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_self_signed(directory: Path, bind: str) -> tuple[Path, Path]:
    """Write ``cert.pem`` and ``key.pem`` (mode 0600) into ``directory``."""
    cert_pem, key_pem = self_signed(bind)
    cert, key = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(cert_pem)
    key.touch(mode=0o600)
    key.write_bytes(key_pem)
    return cert, key
