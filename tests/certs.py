"""A throwaway PKI for the exporter's TLS tests, made with the openssl CLI as the
``secure_mosquitto`` fixture does: a CA, a server certificate for 127.0.0.1
and localhost, and a client certificate, all signed by that CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pki:
    """Where the files are; every key is unencrypted PEM."""

    directory: Path
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(directory: Path) -> Pki:
    """Write a CA, a server and a client certificate into ``directory``; return their paths."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is missing: apt-get install openssl (scripts/test does)")

    def run(*cmd: str) -> None:
        subprocess.run(cmd, check=True, cwd=directory, capture_output=True)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=rainierd test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=prometheus")):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
    return Pki(directory, directory / "ca.crt", directory / "server.crt", directory / "server.key",
               directory / "client.crt", directory / "client.key")
