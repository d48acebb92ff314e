"""Several broker addresses with fail-over: ``mqtt_url`` takes the nodes of a
clustered broker, comma-separated; a client connects to the first that
answers, moves to the next when its broker goes away, and backs off only
after a whole round of the list has failed.  Real Mosquittos, real refused
ports; no mock of the network (so the whole file is in the integration tier)."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator

import aiomqtt
import pytest
import structlog

from harness.procs import free_port
from harness.scrape import current_values
from harness.timing import FAST_TICK_S
from harness.waits import wait_until
from rainierd.errors import ConfigError
from rainierd.mqtt.config import Broker, MqttConfig, parse_brokers
from rainierd.mqtt.connection import ConnectionState
from rainierd.mqtt.supervisor import supervise
from rainierd.settings import load_settings
from tests.conftest import Daemon, MosquittoProcess
from tests.integration.test_accounting import assert_every_frame_accounted, flowing, settled


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound but never listening: a connect there is refused at once, as to a dead node."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


class TestSettings:
    def test_several_urls_are_kept_in_order_without_spaces(self) -> None:
        """Comma-separated URLs are accepted, stripped of spaces, in the order given."""
        settings = load_settings({"mqtt_url": "mqtt://a:1884, mqtts://b , mqtt://[::1]:1885"})
        assert settings.mqtt_url == "mqtt://a:1884,mqtts://b,mqtt://[::1]:1885"

    @pytest.mark.parametrize(("url", "message"), [
        ("mqtt://a:1884,http://b:1883", "'http://b:1883' must start mqtt:// or mqtts://"),
        ("mqtt://a:1884,mqtt://b:99999", "'mqtt://b:99999' has an invalid port"),
        ("mqtt://a:1884,mqtt://u:pw@b:1883", "put credentials in mqtt_username / mqtt_password, not in the URL"),
        ("mqtt://a:1884,", "'' must start mqtt:// or mqtts://"),
        ("mqtt://a:1884,mqtt://a:1884", "'mqtt://a:1884,mqtt://a:1884' names a broker twice"),
    ])
    def test_a_bad_url_in_the_list_is_named(self, url: str, message: str) -> None:
        """Each URL of the list is checked on its own, and the bad one is named in the error."""
        with pytest.raises(ConfigError) as caught:
            load_settings({"mqtt_url": url})
        assert str(caught.value) == f"invalid setting mqtt_url (--mqtt-url / RAINIERD_MQTT_URL): {message}"


class TestConfig:
    def test_brokers_keep_order_scheme_and_default_ports(self) -> None:
        """Each URL becomes one broker with its own TLS flag and default port."""
        assert parse_brokers("mqtt://a,mqtts://b,mqtt://c:1900,mqtt://[::1]:1901") == (
            Broker("a", 1883), Broker("b", 8883, tls=True), Broker("c", 1900), Broker("::1", 1901),
        )

    def test_credentials_and_tls_files_apply_to_every_broker(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """One config carries the list and, once, the credentials and files every broker is reached with."""
        monkeypatch.setenv("RAINIERD_MQTT_PASSWORD", "s3cret")
        settings = load_settings({"mqtt_url": "mqtts://a:8884,mqtts://b:8885", "mqtt_username": "u",
                                  "mqtt_ca_file": "/ca.pem"})
        config = settings.mqtt_config(client_id="c")
        assert (config.brokers, config.username, config.password, str(config.ca_file)) == (
            (Broker("a", 8884, tls=True), Broker("b", 8885, tls=True)), "u", "s3cret", "/ca.pem")
        assert config.url == "mqtts://a:8884,mqtts://b:8885"
        assert "s3cret" not in repr(config)


async def _run_until(config: MqttConfig, state: ConnectionState, failures: int) -> list[dict[str, object]]:
    """Supervise a session that waits for ever; return the warnings logged until ``failures`` failed."""
    async def idle(_: aiomqtt.Client) -> None:
        await asyncio.Event().wait()

    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(supervise(config, idle, state=state, rng=random.Random(1)))
        await wait_until(lambda: state.failures >= failures, 20, f"{failures} failures")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return [entry for entry in logs if entry["event"] == "mqtt connection failed; retrying"]


class TestSupervise:
    async def test_a_dead_first_broker_is_passed_over_for_the_next(
        self, refused_port: int, mosquitto_process: MosquittoProcess,
    ) -> None:
        """With the first broker refusing, the client connects to the second and says which it is on."""
        state = ConnectionState()
        config = MqttConfig(brokers=(Broker("127.0.0.1", refused_port), Broker("127.0.0.1", mosquitto_process.port)),
                            client_id="failover-test", protocol="3.1.1")

        async def session(_: aiomqtt.Client) -> None:
            return None

        await asyncio.wait_for(supervise(config, session, state=state), 10)
        assert (state.broker, state.connects, state.failures) == (
            f"mqtt://127.0.0.1:{mosquitto_process.port}", 1, 1)

    async def test_backoff_only_after_every_broker_failed_in_a_round(self) -> None:
        """Three dead brokers: the next is tried within 0.2 s, and the backoff doubles once per failed round."""
        dead = [socket.socket() for _ in range(3)]
        for s in dead:
            s.bind(("127.0.0.1", 0))
        try:
            brokers = tuple(Broker("127.0.0.1", s.getsockname()[1]) for s in dead)
            state = ConnectionState()
            warnings = await _run_until(MqttConfig(brokers=brokers, client_id="failover-test"), state, 9)
        finally:
            for s in dead:
                s.close()
        urls = [b.url for b in brokers]
        assert [(w["broker"], w["next_broker"]) for w in warnings[:9]] == [
            (urls[i % 3], urls[(i + 1) % 3]) for i in range(9)]
        delays = [float(w["retry_in_s"]) for w in warnings[:9]]  # type: ignore[arg-type]
        # Within a round: a jitter under the 0.2 s base; after it: 0.2 s x 2^round, times 0.5-1.0.
        assert all(delays[i] <= 0.2 for i in (0, 1, 3, 4, 6, 7)), delays
        assert (0.1 <= delays[2] <= 0.2, 0.2 <= delays[5] <= 0.4, 0.4 <= delays[8] <= 0.8) == (True, True, True), delays

    async def test_one_broker_backs_off_on_every_failure(self, refused_port: int) -> None:
        """A single broker keeps the plain exponential backoff: each failure is a whole round."""
        state = ConnectionState()
        warnings = await _run_until(
            MqttConfig(brokers=(Broker("127.0.0.1", refused_port),), client_id="failover-test"), state, 3)
        delays = [float(w["retry_in_s"]) for w in warnings[:3]]  # type: ignore[arg-type]
        assert (0.1 <= delays[0] <= 0.2, 0.2 <= delays[1] <= 0.4, 0.4 <= delays[2] <= 0.8) == (True, True, True), delays

    async def test_the_wait_never_grows_past_the_cap(self, refused_port: int) -> None:
        """However long every broker stays down, a retry comes at least every ``backoff_cap_s``: a broker that
        comes back is answered within it (issue 35: a 10 s outage once cost the monitor 12 s of backoff while
        its publishers were back in 0.5 s, publishing to no subscriber)."""
        state = ConnectionState()
        warnings = await _run_until(
            MqttConfig(brokers=(Broker("127.0.0.1", refused_port),), client_id="failover-test", backoff_cap_s=0.5),
            state, 7)
        delays = [float(w["retry_in_s"]) for w in warnings[:7]]  # type: ignore[arg-type]
        assert max(delays) <= 0.5, delays
        assert all(d >= 0.25 for d in delays[2:]), delays  # capped, still jittered over its upper half

    @pytest.mark.mosquitto
    async def test_a_lost_broker_moves_the_session_to_the_next(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """The connected broker SIGKILLed: the supervisor reconnects on the other one, without backing off."""
        first, second = (MosquittoProcess(tmp_path_factory.mktemp(name)) for name in ("a", "b"))
        first.start()
        second.start()
        try:
            state = ConnectionState()
            config = MqttConfig(brokers=(Broker("127.0.0.1", first.port), Broker("127.0.0.1", second.port)),
                                client_id="failover-test")
            sessions: list[str | None] = []

            async def session(_: aiomqtt.Client) -> None:
                sessions.append(state.broker)
                await asyncio.Event().wait()

            task = asyncio.create_task(supervise(config, session, state=state))
            # The state says connected before the session coroutine has run: wait on the sessions themselves.
            await wait_until(lambda: len(sessions) == 1, 10, "the first session")
            first.kill()
            await wait_until(lambda: len(sessions) == 2, 10, "the second session")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (sessions, state.failures) == (
                [f"mqtt://127.0.0.1:{first.port}", f"mqtt://127.0.0.1:{second.port}"], 1)
        finally:
            first.stop()
            second.stop()


TICK_S = FAST_TICK_S  # many frames across a fail-over, in little wall time


@pytest.mark.mosquitto
async def test_simulate_and_monitor_fail_over_to_the_second_broker(
    tmp_path_factory: pytest.TempPathFactory, start_rainierd: object,
) -> None:
    """Two Mosquittos, both clients given both: the first is SIGKILLed mid-run and never comes back; simulate
    and monitor carry on via the second, every frame is applied or counted lost, and no event is raised."""
    first, second = (MosquittoProcess(tmp_path_factory.mktemp(name)) for name in ("a", "b"))
    first.start()
    second.start()
    try:
        urls = f"mqtt://127.0.0.1:{first.port},mqtt://127.0.0.1:{second.port}"
        port = free_port()
        common = ("--mqtt-url", urls, "--tick", str(TICK_S))
        monitor: Daemon = start_rainierd("monitor", *common, "--metrics-addr",  # type: ignore[operator]
                                         f"127.0.0.1:{port}", name="monitor")
        try:  # a loaded machine: the monitor's start (imports, the exporter) has taken over 20 s
            await wait_until(lambda: current_values(port).get("rainier_mqtt_connected") == 1, 60,
                             "the monitor to connect")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{monitor.log()[-3000:]}") from None
        sim: Daemon = start_rainierd("simulate", *common, "--ticks", "100", "--seed", "7",  # type: ignore[operator]
                                     name="simulate")
        await flowing(port, "start")
        await asyncio.sleep(3.0)
        first.kill()
        await flowing(port, "after the first broker died")
        values = await settled(port, sim, timeout_s=60)
        assert_every_frame_accounted(values, sim)
        assert values.counted["rainier_mqtt_connection_failures_total"] == 1
        for daemon in (monitor, sim):
            connected = [line for line in daemon.log().splitlines() if '"mqtt connected"' in line]
            assert [f"127.0.0.1:{p}" in line for line, p in zip(connected, (first.port, second.port), strict=True)] \
                == [True, True], daemon.log()[-3000:]
        assert monitor.proc.poll() is None
        assert "rainierd task failed" not in monitor.events()
    finally:
        first.stop()
        second.stop()
