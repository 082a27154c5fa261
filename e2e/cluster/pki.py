"""Certificates and keys of one control-plane run, made at start. Writes files.

One CA signs everything: the apiserver's serving certificate (for 127.0.0.1 and
localhost), and client certificates whose subject is the identity the apiserver sees
(CN = user, O = groups): the admin (``system:masters``), the controller-manager, the
scheduler and one per node (``system:node:<name>`` in ``system:nodes``, the identity the
Node authorizer and NodeRestriction admission key on). A second CA signs the front
proxy's client certificate, with which the apiserver forwards requests to aggregated
APIs (and which delegated authentication in the controller-manager and the scheduler
expects to find). ECDSA P-256 keys: generating them takes milliseconds, so every run
gets fresh ones.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=30)
"""Lifetime of every certificate; far longer than any run."""

ADMIN_USER = "tandem-e2e-admin"
ADMIN_GROUPS = ("system:masters",)


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate and its PEM private key on disk."""

    cert: Path
    key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _load_ca(ca: CertPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca.key}: expected an ECDSA key")
    return cert, key


def make_ca(directory: Path, name: str = "tandem-e2e-ca", stem: str = "ca") -> CertPair:
    """A self-signed CA in ``directory/<stem>.{crt,key}``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def make_cert(
    ca: CertPair,
    directory: Path,
    stem: str,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
    client: bool = True,
) -> CertPair:
    """A leaf certificate signed by ``ca`` in ``directory/<stem>.{crt,key}``.

    ``server_names`` (DNS names and IP addresses) make it a serving certificate;
    ``client`` lets it authenticate as ``common_name`` in ``organizations``.
    """
    ca_cert, ca_key = _load_ca(ca)
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    usages = []
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if server_names:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for n in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def make_signing_key(directory: Path, stem: str = "sa") -> CertPair:
    """The ServiceAccount token signing key (``.key``) and its public key (``.pub``)."""
    key = _new_key()
    pair = CertPair(directory / f"{stem}.pub", directory / f"{stem}.key")
    _write_key(key, pair.key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair
