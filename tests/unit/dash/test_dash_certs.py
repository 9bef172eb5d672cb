"""The run's CA and the server's leaf (certs.py): a CA:FALSE leaf with the addresses as SANs, signed by the CA."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from nest_experiments.dash.origin import certs


def _load(issued: certs.Issued) -> tuple[x509.Certificate, x509.Certificate, x509.Certificate]:
    leaf, chained_ca = x509.load_pem_x509_certificates(issued.chain)
    return x509.load_pem_x509_certificate(issued.ca), leaf, chained_ca


def test_leaf_is_not_a_ca_and_the_ca_is() -> None:
    ca, leaf, chained_ca = _load(certs.issue(["10.0.1.2"]))
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert chained_ca == ca
    assert leaf.issuer == ca.subject and leaf.subject != ca.subject


def test_leaf_names_the_addresses() -> None:
    _, leaf, _ = _load(certs.issue(["10.0.1.2", "fd00::2", "0.0.0.0", "server.test"]))
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = set(san.get_values_for_type(x509.IPAddress))
    assert {ipaddress.ip_address("10.0.1.2"), ipaddress.ip_address("fd00::2"),
            ipaddress.ip_address("127.0.0.1")} <= ips  # fmt: skip
    assert ipaddress.ip_address("0.0.0.0") not in ips  # a wildcard bind is no address to name
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "server.test"}


@pytest.mark.parametrize("name", ["10.0.1.2", "localhost"])
def test_leaf_verifies_against_the_ca(name: str) -> None:
    ca, leaf, _ = _load(certs.issue(["10.0.1.2"]))
    subject = x509.IPAddress(ipaddress.ip_address(name)) if name[0].isdigit() else x509.DNSName(name)
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(subject)
    chain = verifier.verify(leaf, [])
    assert chain[-1] == ca


def test_leaf_does_not_verify_for_another_address_or_against_another_ca() -> None:
    ca, leaf, _ = _load(certs.issue(["10.0.1.2"]))
    other_ca, _, _ = _load(certs.issue(["10.0.1.2"]))
    wrong_ip = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.IPAddress(ipaddress.ip_address("10.0.9.9")))
    with pytest.raises(VerificationError):
        wrong_ip.verify(leaf, [])
    wrong_ca = PolicyBuilder().store(Store([other_ca])).build_server_verifier(x509.DNSName("localhost"))
    with pytest.raises(VerificationError):
        wrong_ca.verify(leaf, [])


def test_key_matches_the_leaf_and_files_are_written(tmp_path: Path) -> None:
    files = certs.write_certs(tmp_path, ["10.0.1.2"])
    key = load_pem_private_key(files.key.read_bytes(), None)
    leaf = x509.load_pem_x509_certificates(files.chain.read_bytes())[0]
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()  # type: ignore[union-attr]
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert x509.load_pem_x509_certificate(files.ca.read_bytes()).subject == leaf.issuer
