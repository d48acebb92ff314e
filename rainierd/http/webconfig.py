"""The exporter's web configuration file: TLS and basic auth for ``/metrics``,
in the Prometheus exporter-toolkit format, so one file serves rainierd and
the node_exporter next to it.

Format: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md
rainierd reads the subset below; any other key stops it at start, since a
file that asks for a protection rainierd would silently not give is worse
than no file::

    tls_server_config:
      cert_file: server.crt          # relative paths: from this file's directory
      key_file: server.key
      client_auth_type: NoClientCert  # or VerifyClientCertIfGiven, RequireAndVerifyClientCert
      client_ca_file: ca.crt          # needed when client certificates are verified
      min_version: TLS12              # or TLS13
      max_version: TLS13
    basic_auth_users:
      prometheus: $2y$10$...          # a bcrypt hash

The whole file is read and checked once, at start: every error is a
ConfigError with one line naming the file and the key, and the certificate
and key are loaded then, so a bad one never waits for the first scrape.
Unlike exporter-toolkit rainierd does not re-read the file per request; a
changed file takes effect on restart.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Hashable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args

import yaml

from rainierd.errors import ConfigError

ClientAuthType = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]
TLSVersion = Literal["TLS12", "TLS13"]

_VERIFY_MODES: Final[dict[str, ssl.VerifyMode]] = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS: Final[dict[str, ssl.TLSVersion]] = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_TLS_KEYS: Final = frozenset({"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
                              "max_version"})
# exporter-toolkit options that rainierd knows of but does not implement.
_UNSUPPORTED: Final = frozenset({
    "tls_server_config.cert", "tls_server_config.key", "tls_server_config.client_ca",
    "tls_server_config.client_allowed_sans", "tls_server_config.cipher_suites",
    "tls_server_config.prefer_server_cipher_suites", "tls_server_config.curve_preferences",
    "http_server_config", "rate_limit",
})
# The modular-crypt form of bcrypt: $2a$, $2b$ or $2y$ (htpasswd), a cost of
# 04 to 31, then 22 characters of salt and 31 of hash in bcrypt's base64.
_BCRYPT_HASH: Final = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


@dataclass(frozen=True, slots=True)
class TLSServerConfig:
    """``tls_server_config``: the exporter's certificate and its client policy."""

    cert_file: Path
    key_file: Path
    client_auth_type: ClientAuthType = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: TLSVersion = "TLS12"
    max_version: TLSVersion = "TLS13"

    def ssl_context(self) -> ssl.SSLContext:
        """Return a server SSLContext with the certificate loaded.

        Raises ConfigError when a file cannot be read or does not hold what it should.
        """
        files = {"cert_file": self.cert_file, "key_file": self.key_file, "client_ca_file": self.client_ca_file}
        for key, path in files.items():
            if path is not None:
                _check_readable(key, path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _TLS_VERSIONS[self.min_version]
        context.maximum_version = _TLS_VERSIONS[self.max_version]
        try:
            # An encrypted key would make OpenSSL prompt on the terminal; it fails instead.
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_passphrase)
        except _EncryptedKeyError:
            message = f"tls_server_config.key_file {self.key_file} is encrypted; rainierd needs it unencrypted"
            raise ConfigError(message) from None
        except OSError as exc:
            message = (f"tls_server_config.cert_file {self.cert_file} and key_file {self.key_file} are not "
                       f"a PEM certificate and its key ({_reason(exc)})")
            raise ConfigError(message) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except OSError as exc:
                message = f"tls_server_config.client_ca_file {self.client_ca_file} holds no PEM CA ({_reason(exc)})"
                raise ConfigError(message) from None
        context.verify_mode = _VERIFY_MODES[self.client_auth_type]
        return context


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A checked web configuration file: TLS if ``tls`` is set, basic auth if there are users."""

    tls: TLSServerConfig | None
    basic_auth_users: tuple[tuple[str, bytes], ...]  # (username, bcrypt hash), in file order


def load_web_config(path: Path) -> WebConfig:
    """Return the checked web configuration in ``path``; the certificate is loaded once to check it.

    Raises ConfigError with one line naming the file and what is wrong.
    """
    try:
        return _parse(path)
    except ConfigError as exc:
        raise ConfigError(f"web config file {path}: {exc}") from None


def _parse(path: Path) -> WebConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(exc.strerror or type(exc).__name__) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text") from None
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(_yaml_reason(exc)) from None
    if document is None:  # an empty file, as exporter-toolkit reads it: no TLS, no users
        document = {}
    top = _mapping(document, "the file")
    _check_keys(top, {"tls_server_config", "basic_auth_users"}, prefix="")
    tls = None
    if top.get("tls_server_config") is not None:
        tls = _tls(_mapping(top["tls_server_config"], "tls_server_config"), base=path.parent)
        tls.ssl_context()
    users = _users(_mapping(top.get("basic_auth_users") or {}, "basic_auth_users"))
    return WebConfig(tls=tls, basic_auth_users=users)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe subset, refusing a key given twice (a user listed twice would keep only the last hash)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep)


def _tls(section: dict[str, Any], *, base: Path) -> TLSServerConfig:
    _check_keys(section, _TLS_KEYS, prefix="tls_server_config.")
    values = {key: _string(value, f"tls_server_config.{key}") for key, value in section.items() if value is not None}
    for key in ("cert_file", "key_file"):
        if key not in values:
            raise ConfigError(f"tls_server_config.{key} is missing")
    auth = values.get("client_auth_type", "NoClientCert")
    if auth in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert"):
        raise ConfigError(f"tls_server_config.client_auth_type {auth} accepts certificates it does not verify, "
                          "which rainierd does not support; use RequireAndVerifyClientCert")
    if auth not in get_args(ClientAuthType):
        raise ConfigError(f"tls_server_config.client_auth_type {auth!r} is not one of "
                          f"{', '.join(get_args(ClientAuthType))}")
    if "client_ca_file" in values and auth == "NoClientCert":
        raise ConfigError("tls_server_config.client_ca_file is set but client_auth_type is NoClientCert; "
                          "set client_auth_type: RequireAndVerifyClientCert")
    if "client_ca_file" not in values and auth != "NoClientCert":
        raise ConfigError(f"tls_server_config.client_auth_type {auth} needs client_ca_file, "
                          "the CA that client certificates are verified against")
    min_version, max_version = values.get("min_version", "TLS12"), values.get("max_version", "TLS13")
    for key, version in (("min_version", min_version), ("max_version", max_version)):
        if version not in _TLS_VERSIONS:
            raise ConfigError(f"tls_server_config.{key} {version!r} is not TLS12 or TLS13")
    if _TLS_VERSIONS[min_version] > _TLS_VERSIONS[max_version]:
        raise ConfigError(f"tls_server_config.min_version {min_version} is above max_version {max_version}")
    ca = values.get("client_ca_file")
    return TLSServerConfig(
        cert_file=base / values["cert_file"], key_file=base / values["key_file"],  # an absolute path stays as it is
        client_auth_type=auth,  # type: ignore[arg-type]  # checked against ClientAuthType above
        client_ca_file=None if ca is None else base / ca,
        min_version=min_version,  # type: ignore[arg-type]  # checked against _TLS_VERSIONS above
        max_version=max_version,  # type: ignore[arg-type]
    )


def _users(section: dict[str, Any]) -> tuple[tuple[str, bytes], ...]:
    users = []
    for name, hashed in section.items():
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(f"basic_auth_users: {name!r} is not a valid username (a string without ':')")
        # The hash is not echoed: it is not the password, but it need not be in a log either.
        if not isinstance(hashed, str) or _BCRYPT_HASH.fullmatch(hashed) is None:
            raise ConfigError(f"basic_auth_users.{name} is not a bcrypt hash ($2y$10$... from "
                              "htpasswd -nBC 10 or bcrypt.hashpw; docs/exporter-security.md)")
        users.append((name, hashed.encode("ascii")))
    return tuple(users)


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping, not {type(value).__name__}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where} must be a non-empty string")
    return value


def _check_keys(section: dict[str, Any], known: AbstractSet[str], *, prefix: str) -> None:
    for key in section:
        name = f"{prefix}{key}"
        if name in _UNSUPPORTED:
            raise ConfigError(f"{name} is an exporter-toolkit option that rainierd does not support")
        if key not in known:
            raise ConfigError(f"unknown key {name} (known: {', '.join(prefix + k for k in sorted(known))})")


def _yaml_reason(exc: yaml.YAMLError) -> str:
    # str() of a YAML error spans several lines and quotes the file; one line, no quote.
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not valid YAML at line {mark.line + 1} column {mark.column + 1}: {exc.problem}"
    return "not valid YAML"


def _check_readable(key: str, path: Path) -> None:
    # Checked one by one so that the message names the file that is missing.
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"tls_server_config.{key} {path}: {exc.strerror or exc}") from None


def _reason(exc: OSError) -> str:
    return str(getattr(exc, "reason", None) or exc.strerror or exc)


class _EncryptedKeyError(Exception):
    """OpenSSL asked for the key's passphrase."""


def _no_passphrase() -> bytes:
    raise _EncryptedKeyError
