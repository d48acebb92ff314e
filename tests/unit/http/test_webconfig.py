"""Specification of the exporter's web configuration file (exporter-toolkit
format): what it reads, the one-line errors that stop rainierd at start, and
client certificates against a real in-process TLS server.  The command line's
exit code 2 is pinned in tests/integration/test_exporter_tls.py."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import bcrypt
import pytest

from rainierd.errors import ConfigError
from rainierd.http.server import HttpServer
from rainierd.http.webconfig import TLSServerConfig, WebConfig, load_web_config
from tests.certs import Pki, make_pki
from tests.serving import OK, role_server

# Cost 4, bcrypt's least: these tests are about the format, not the cost.
# bcrypt of "correct horse" with a fixed salt: a hash made at import would change the parametrized test ids
# below on every collection, and pytest-xdist's workers must collect the same tests.
HASH = "$2b$04$rainierdtestsaltrainieU5l1638n5e6FyUqNcJ1l8bsHwOrSO5W"
assert bcrypt.checkpw(b"correct horse", HASH.encode())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA with a server and a client certificate, made once for the module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def write(directory: Path, text: str) -> Path:
    path = directory / "web.yml"
    path.write_text(text)
    return path


class TestLoad:
    def test_full_file(self, pki: Pki) -> None:
        """Every key rainierd reads arrives; relative paths are taken from the file's directory."""
        path = write(pki.directory, f"""
tls_server_config:
  cert_file: server.crt
  key_file: {pki.server_key}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.crt
  min_version: TLS13
basic_auth_users:
  prometheus: {HASH}
  grafana: {HASH.replace("$2b$", "$2y$")}
""")
        assert load_web_config(path) == WebConfig(
            tls=TLSServerConfig(
                cert_file=pki.server_cert, key_file=pki.server_key, client_auth_type="RequireAndVerifyClientCert",
                client_ca_file=pki.ca_cert, min_version="TLS13", max_version="TLS13",
            ),
            basic_auth_users=(("prometheus", HASH.encode()), ("grafana", HASH.replace("$2b$", "$2y$").encode())),
        )

    def test_tls_defaults(self, pki: Pki) -> None:
        """With only the certificate and key: no client certificates, TLS 1.2 to 1.3, no users."""
        path = write(pki.directory, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
        assert load_web_config(path) == WebConfig(
            tls=TLSServerConfig(cert_file=pki.server_cert, key_file=pki.server_key), basic_auth_users=(),
        )

    def test_users_without_tls(self, tmp_path: Path) -> None:
        """basic_auth_users alone asks for passwords over plain HTTP."""
        path = write(tmp_path, f"basic_auth_users:\n  prometheus: '{HASH}'\n")
        assert load_web_config(path) == WebConfig(tls=None, basic_auth_users=(("prometheus", HASH.encode()),))

    def test_empty_file(self, tmp_path: Path) -> None:
        """An empty file, as exporter-toolkit reads it, asks for nothing."""
        assert load_web_config(write(tmp_path, "")) == WebConfig(tls=None, basic_auth_users=())

    def test_htpasswd_hash(self, tmp_path: Path) -> None:
        """A $2y$ hash, as `htpasswd -nBC 10` writes it, is accepted and checks its password."""
        hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$")
        config = load_web_config(write(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n"))
        assert config.basic_auth_users == (("prometheus", hashed.encode()),)
        assert bcrypt.checkpw(b"s3cret", config.basic_auth_users[0][1])


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


class TestInvalid:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("tls_server_config: [\n", "not valid YAML at line 2 column 1"),
            ("- basic_auth_users\n", "the file must be a mapping, not list"),
            ("basic_auth_users:\n  a: x\n  a: y\n", "not valid YAML at line 3 column 3: key 'a' is given twice"),
            ("tls_config:\n  cert_file: a\n", "unknown key tls_config (known: basic_auth_users, tls_server_config)"),
            (TLS + "  certfile: x\n", "unknown key tls_server_config.certfile (known: tls_server_config.cert_file,"),
            (TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
             "tls_server_config.cipher_suites is an exporter-toolkit option that rainierd does not support"),
            ("http_server_config:\n  http2: false\n",
             "http_server_config is an exporter-toolkit option that rainierd does not support"),
            ("basic_auth_users:\n  prometheus: hunter2\n", "basic_auth_users.prometheus is not a bcrypt hash"),
            ("basic_auth_users:\n  prometheus: '$2b$10$short'\n", "basic_auth_users.prometheus is not a bcrypt hash"),
            ("basic_auth_users:\n  prometheus: 42\n", "basic_auth_users.prometheus is not a bcrypt hash"),
            ("basic_auth_users:\n  'a:b': '" + HASH + "'\n", "'a:b' is not a valid username"),
            ("tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file is missing"),
            ("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
             "tls_server_config.cert_file {dir}/nope.crt: No such file or directory"),
            ("tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
             "tls_server_config.cert_file {dir}/server.key and key_file {dir}/server.key are not a PEM certificate"),
            ("tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
             "are not a PEM certificate and its key"),
            ("tls_server_config:\n  cert_file: server.crt\n  key_file: encrypted.key\n",
             "tls_server_config.key_file {dir}/encrypted.key is encrypted"),
            ("tls_server_config:\n  cert_file: /\n  key_file: server.key\n",
             "tls_server_config.cert_file /: Is a directory"),
            (TLS + "  client_ca_file: ca.crt\n",
             "client_ca_file is set but client_auth_type is NoClientCert"),
            (TLS + "  client_auth_type: RequireAndVerifyClientCert\n",
             "client_auth_type RequireAndVerifyClientCert needs client_ca_file"),
            (TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n",
             "accepts certificates it does not verify"),
            (TLS + "  client_auth_type: yes\n", "tls_server_config.client_auth_type must be a non-empty string"),
            (TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: server.key\n",
             "tls_server_config.client_ca_file {dir}/server.key holds no PEM CA"),
            (TLS + "  min_version: TLS11\n", "tls_server_config.min_version 'TLS11' is not TLS12 or TLS13"),
            (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version TLS13 is above max_version TLS12"),
        ],
    )
    def test_error_is_one_line_naming_file_and_key(self, pki: Pki, tmp_path: Path, text: str, message: str) -> None:
        """A bad file raises ConfigError: one line naming the file and what in it is wrong."""
        path = pki.directory / f"bad-{tmp_path.name}.yml"
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_web_config(path)
        error = str(info.value)
        assert error.startswith(f"web config file {path}: ")
        assert message.format(dir=pki.directory) in error
        assert "\n" not in error
        assert "hunter2" not in error

    def test_missing_file(self, tmp_path: Path) -> None:
        """A file that is not there is named, with the system's reason."""
        with pytest.raises(ConfigError, match=r"^web config file .*/nope\.yml: No such file or directory$"):
            load_web_config(tmp_path / "nope.yml")


class TestClientCertificates:
    @pytest.fixture
    async def server(self, pki: Pki) -> AsyncIterator[HttpServer]:
        web = load_web_config(write(pki.directory, TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
                                                         "  client_ca_file: ca.crt\n"))
        async with role_server(ready=lambda: OK, web=web) as server:
            yield server

    async def get(self, port: int, context: ssl.SSLContext) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        response = await reader.read()
        writer.close()
        return response

    async def test_verified_client_certificate_is_served(self, server: HttpServer, pki: Pki) -> None:
        """With RequireAndVerifyClientCert a client showing a certificate from client_ca_file is served."""
        context = ssl.create_default_context(cafile=pki.ca_cert)
        context.load_cert_chain(pki.client_cert, pki.client_key)
        assert (await self.get(server.port, context)).startswith(b"HTTP/1.1 200 OK\r\n")

    async def test_client_without_certificate_is_refused(self, server: HttpServer, pki: Pki) -> None:
        """With RequireAndVerifyClientCert a client without a certificate gets no response, and the server serves on."""
        context = ssl.create_default_context(cafile=pki.ca_cert)
        try:  # under TLS 1.3 the refusal arrives after the client's side of the handshake is done
            response = await self.get(server.port, context)
        except (ssl.SSLError, ConnectionError):
            response = b""
        assert response == b""
        context.load_cert_chain(pki.client_cert, pki.client_key)
        assert (await self.get(server.port, context)).startswith(b"HTTP/1.1 200 OK\r\n")
