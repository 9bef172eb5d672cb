"""TLS certificates for the DASH servers, issued at run time: a CA and a leaf it signs.

The leaf (``CA:FALSE``, serverAuth) names the server's addresses as IP SANs,
plus ``localhost`` and the loopback addresses; clients trust the CA. A single
self-signed ``CA:TRUE`` certificate served as the leaf is refused by rustls-
based verifiers (qh3: ``TLS_BAD_CERTIFICATE``), so the two are kept apart.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DNS_NAME = "localhost"


@dataclass(frozen=True, kw_only=True)
class Issued:
    """PEM bytes: the CA's certificate (what clients trust), the leaf + CA chain, the leaf's key."""

    ca: bytes
    chain: bytes
    key: bytes


@dataclass(frozen=True, kw_only=True)
class CertFiles:
    """Where :func:`write_certs` put them."""

    ca: Path
    chain: Path
    key: Path


def subject_alt_names(addresses: Iterable[str]) -> x509.SubjectAlternativeName:
    """``localhost``, the loopback addresses and every address given (a name that is not an IP is a DNS SAN)."""
    names: list[x509.GeneralName] = [
        x509.DNSName(DNS_NAME),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    for text in addresses:
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            name: x509.GeneralName = x509.DNSName(text)
        else:
            if addr.is_unspecified or addr.is_loopback:
                continue
            name = x509.IPAddress(addr)
        if name not in names:
            names.append(name)
    return x509.SubjectAlternativeName(names)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days)))  # fmt: skip


def _ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("nest_experiments run CA")
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)  # fmt: skip
    cert = (_builder(name, name, key, days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))  # fmt: skip
    return cert, key


def _leaf(addresses: Iterable[str], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)  # fmt: skip
    cert = (_builder(_name("nest_experiments dash server"), ca.subject, key, days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(subject_alt_names(addresses), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    return cert, key


def issue(addresses: Iterable[str], *, days: int = 2) -> Issued:
    """A fresh CA and a leaf for ``addresses`` signed by it (keys are never reused)."""
    ca, ca_key = _ca(days)
    leaf, key = _leaf(addresses, ca, ca_key, days)
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return Issued(ca=ca.public_bytes(pem), chain=leaf.public_bytes(pem) + ca.public_bytes(pem), key=key_pem)


def write_certs(directory: Path, addresses: Iterable[str]) -> CertFiles:
    """Write ``ca.pem``, ``chain.pem`` (leaf then CA) and ``key.pem`` (mode 0600) into ``directory``."""
    issued = issue(addresses)
    files = CertFiles(ca=directory / "ca.pem", chain=directory / "chain.pem", key=directory / "key.pem")
    files.ca.write_bytes(issued.ca)
    files.chain.write_bytes(issued.chain)
    files.key.touch(mode=0o600)
    files.key.write_bytes(issued.key)
    return files
