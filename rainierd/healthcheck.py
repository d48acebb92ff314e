"""``rainierd healthcheck``: the image's HEALTHCHECK, a verdict on the role
running beside it, read from the same settings that role reads.

Why a command and not ``curl``/a Python one-liner in the Dockerfile: the
probe must go where the role listens.  It takes ``metrics_addr`` and
``web_config_file`` from the same ``RAINIERD_*`` environment and config file
(``--config`` / ``RAINIERD_CONFIG``) as the role, so moving the port or turning
on TLS and basic auth moves the probe with it; a hard-coded
``http://127.0.0.1:9780`` went unhealthy on both.

What each role answers (every role in the image serves HTTP):

- ``run`` and ``monitor``: the exporter's ``/healthz`` (unhealthy once analysis
  has stalled for ten ticks) and ``/readyz`` (connected, a tick analysed, not
  overloaded).
- ``simulate``: it has no metrics to export, but it serves the same two probes
  on ``metrics_addr`` when that is set (the image sets it): ``/healthz`` is
  unhealthy once its ticks stop advancing for ten ticks, ``/readyz`` wants the
  broker connected.  HTTP rather than a heartbeat file, because a heartbeat
  needs a writable path in a read-only container and only an exec probe can
  read it, while an HTTP probe serves Docker, compose, Kubernetes ``httpGet``
  and this command alike.  Only when set, because two processes on one host
  (a simulator beside a monitor, as the benchmarks and tests run them) would
  otherwise contend for the default port.

The probe speaks to its own process, over loopback when the role listens on
every address (``0.0.0.0`` or ``::``).  Over TLS it does not verify the
server's certificate: what it must learn is whether the server answers, not
who it is, and a certificate made for a service name does not name
``127.0.0.1``; Kubernetes' HTTPS probes do the same.  With basic auth it
sends the settings' ``healthcheck_user`` (default: the web config's only
user) and the password in the file ``healthcheck_password_file`` names
(``--basic-auth-user`` and ``--basic-auth-password-file``, as for ``top`` and
``node-check``, or ``RAINIERD_HEALTHCHECK_USER`` and
``RAINIERD_HEALTHCHECK_PASSWORD_FILE``), never printed.  A web config that
requires client certificates cannot be probed this way and says so.

It takes its own ``HealthcheckConfig`` (``Settings.healthcheck_config``),
never the settings whole.

Exit status 0 when healthy, 1 when not, with one line on stdout either way
(Docker keeps it in the container's health log).
"""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from rainierd.errors import ConfigError
from rainierd.http.client import basic_authorization
from rainierd.http.webconfig import load_web_config
from rainierd.runtime import Verdict

DEFAULT_TIMEOUT_S: Final = 2.0  # well under the Dockerfile's HEALTHCHECK --timeout, so this reports, not Docker
# What a probe missing a credential is told to set (the settings healthcheck_user and healthcheck_password_file).
_USER_HINT: Final = "--basic-auth-user or RAINIERD_HEALTHCHECK_USER"
_PASSWORD_HINT: Final = "--basic-auth-password-file or RAINIERD_HEALTHCHECK_PASSWORD_FILE"
_ANY_ADDRESS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
_MAX_BODY_BYTES: Final = 4_096


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthcheckConfig:
    """Where the role beside the probe listens and how to get in (settings ``metrics_addr``,
    ``web_config_file``, ``healthcheck_user``, ``healthcheck_password_file``)."""

    host: str
    port: int
    web_config_file: Path | None = None
    user: str | None = None  # None: the web config's only user
    password_file: Path | None = None


def check(
    config: HealthcheckConfig,
    *,
    probe: Literal["healthz", "readyz"] = "healthz",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Verdict:
    """Return the verdict of the role listening at ``config``'s address on ``/healthz`` (or ``/readyz``).

    Never raises for what the probe finds (nothing listening, a refusal, a
    bad web config, an unreadable password file): each is an unhealthy
    verdict with a one-line reason.
    """
    host, port = _ANY_ADDRESS.get(config.host, config.host), config.port
    prepared = _prepare(config)
    if isinstance(prepared, Verdict):
        return prepared
    context, headers = prepared
    scheme = "https" if context is not None else "http"
    url = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/{probe}"
    connection = (http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
                  if context is not None else http.client.HTTPConnection(host, port, timeout=timeout_s))
    try:
        connection.request("GET", f"/{probe}", headers=headers)
        response = connection.getresponse()
        body = response.read(_MAX_BODY_BYTES).decode(errors="replace").strip().replace("\n", " ")
    except ConnectionRefusedError:
        return Verdict(False, f"{url}: nothing listening (a simulator serves its probes only when "
                             "metrics_addr is set)")
    except TimeoutError:
        return Verdict(False, f"{url}: no answer within {timeout_s:g} s")
    except ssl.SSLError as exc:
        return Verdict(False, f"{url}: TLS failed: {exc.reason or exc}")
    except (OSError, http.client.HTTPException) as exc:
        return Verdict(False, f"{url}: {exc or type(exc).__name__}")
    finally:
        connection.close()
    if response.status == http.client.OK:
        return Verdict(True, f"{url}: {body or 'ok'}")
    if response.status == http.client.UNAUTHORIZED:
        return Verdict(False, f"{url}: 401, the server refused the healthcheck's credentials")
    return Verdict(False, f"{url}: {response.status} {body or response.reason}")


def _prepare(config: HealthcheckConfig) -> Verdict | tuple[ssl.SSLContext | None, dict[str, str]]:
    """Return the TLS context and headers the web config calls for, or the verdict that it cannot be probed."""
    headers = {"User-Agent": "rainierd-healthcheck", "Connection": "close"}
    if config.web_config_file is None:
        return None, headers
    try:
        web = load_web_config(config.web_config_file)
    except ConfigError as exc:
        return Verdict(False, str(exc))
    context: ssl.SSLContext | None = None
    if web.tls is not None:
        if web.tls.client_auth_type == "RequireAndVerifyClientCert":
            return Verdict(False, "the web config requires client certificates; the healthcheck has none "
                                 "(probe /healthz from a client that has one)")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if web.basic_auth_users:
        users = [name for name, _hash in web.basic_auth_users]
        user = config.user or (users[0] if len(users) == 1 else None)
        missing = [hint for hint, given in ((_USER_HINT, user), (_PASSWORD_HINT, config.password_file))
                   if given is None]
        if user is None or config.password_file is None:
            return Verdict(False, f"the web config asks for basic auth: set {' and '.join(missing)}")
        try:
            headers["Authorization"] = basic_authorization(user, config.password_file)
        except ValueError as exc:
            return Verdict(False, str(exc))
    return context, headers
