"""A throwaway PKI for the exporter's TLS tests, made in-process with the
``cryptography`` package (the unit tier starts no process, not even
openssl): a CA, a server certificate for 127.0.0.1 and localhost, a client
certificate, all signed by that CA, and the server key once more, encrypted."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ENCRYPTED_KEY_PASSWORD = b"x"


@dataclass(frozen=True)
class Pki:
    """Where the files are; every key is unencrypted PEM but ``encrypted_key``."""

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    encrypted_key: Path  # the server key, encrypted with ENCRYPTED_KEY_PASSWORD


def _write_key(path: Path, key: rsa.RSAPrivateKey, encryption: serialization.KeySerializationEncryption) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))


def _certificate(subject: str, key: rsa.RSAPrivateKey, issuer: x509.Name, issuer_key: rsa.RSAPrivateKey,
                 extensions: list[x509.ExtensionType]) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1)))
    for extension in extensions:
        builder = builder.add_extension(extension, critical=isinstance(extension, x509.BasicConstraints))
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    """Write a CA, a server and a client certificate into ``directory``; return their paths."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rainierd test CA")])
    ca = _certificate("rainierd test CA", ca_key, ca_name, ca_key, [x509.BasicConstraints(ca=True, path_length=None)])
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(directory / "ca.key", ca_key, serialization.NoEncryption())
    leaves: dict[str, tuple[str, list[x509.ExtensionType]]] = {
        "server": ("127.0.0.1", [x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])]),
        "client": ("prometheus", [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])]),
    }
    for name, (subject, extensions) in leaves.items():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = _certificate(subject, key, ca_name, ca_key, extensions)
        (directory / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / f"{name}.key", key, serialization.NoEncryption())
        if name == "server":
            _write_key(directory / "encrypted.key", key, serialization.BestAvailableEncryption(ENCRYPTED_KEY_PASSWORD))
    return Pki(directory, directory / "ca.crt", directory / "server.crt", directory / "server.key",
               directory / "client.crt", directory / "client.key", directory / "encrypted.key")
