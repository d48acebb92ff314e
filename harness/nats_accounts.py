"""Who may log in to the NATS cluster, and as what: rainierd's identities
written as NATS accounts and per-user permissions, the NATS counterpart of
deploy/mosquitto/acl (docs/scaling.md "Identities on NATS").

NATS cannot bind an MQTT client id to a user (it has no
``use_username_as_clientid``; only an auth-callout service, from NATS 2.10,
sees the id).  What it does scope is the session: an MQTT session lives in
its user's *account*, so a client id is unique per account, and a connection
in one account never closes a session of another.  So the monitors log in to
an account of their own (``MONITORS``) and everything that publishes
telemetry to another (``AGENTS``): a node agent that borrows the monitor's
client id opens a session of its own in ``AGENTS`` and the monitor never
notices.  Telemetry crosses from ``AGENTS`` to ``MONITORS`` as an exported
stream, health events back the other way.  Retained messages are per account
too, and an import carries live messages only: a node agent's retained
telemetry is never replayed to a monitor that connects later.

Inside an account ids are still first come, first served: a node agent's
credentials can take another agent's session (that node's frames are then
lost, and counted lost by sequence number), and a monitor's credentials
another monitor's.  Per-user permissions keep each user to its own subjects
(NATS drops a publish outside them and logs a "Publish Violation"; the
connection stays up).

Passwords are written in the clear here: this is the loopback throwaway
cluster of harness/cluster.py.  A real deployment writes bcrypt hashes
(``nats server passwd``) or uses NKeys.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["AGGREGATOR_USERS", "MONITOR_USERS", "PUBLISHER_USERS", "Identities"]

MONITOR_USERS = ("rainierd-monitor", "rainierd-monitor-0", "rainierd-monitor-1")
"""The shipped monitor users (deploy/mosquitto/make-credentials): the unsharded monitor and two shards."""
PUBLISHER_USERS = ("rainierd-sim",)
"""Users that publish any node's telemetry: the simulator."""
AGGREGATOR_USERS = ("rainierd-aggregate-0", "rainierd-aggregate-1")
"""The shipped aggregators (rainierd aggregate, docs/aggregation.md): they read node frames and write batches."""

_TELEMETRY = "rainier.v1.telemetry"
# An MQTT filter ending in # is two NATS subscriptions, on the subject itself and below it.
_BELOW = ("rainier.v1.{}", "rainier.v1.{}.>")
# A QoS 1 subscription is delivered through a JetStream consumer on $MQTT.sub.<nuid>.
_QOS1 = "$MQTT.sub.>"


def _password() -> str:
    return secrets.token_urlsafe(18)


def _status(user: str) -> str:
    """Return the status subject of ``user`` (rainier/v1/status/<client id>, the id being the user's name)."""
    return f"rainier.v1.status.{user}"


@dataclass(frozen=True)
class Identities:
    """Users of the two accounts and their passwords."""

    monitors: Mapping[str, str] = field(default_factory=dict)  # user -> password, account MONITORS
    publishers: Mapping[str, str] = field(default_factory=dict)  # user -> password, account AGENTS
    agents: Mapping[str, str] = field(default_factory=dict)  # node agents n<id> -> password, account AGENTS
    aggregators: Mapping[str, str] = field(default_factory=dict)  # user -> password, account AGENTS

    @classmethod
    def generate(cls, *, agents: tuple[str, ...] = ()) -> Identities:
        """Return the shipped users and the node agents ``agents`` (n<id>), each with a random password."""
        return cls(monitors={u: _password() for u in MONITOR_USERS},
                   publishers={u: _password() for u in PUBLISHER_USERS},
                   agents={u: _password() for u in agents},
                   aggregators={u: _password() for u in AGGREGATOR_USERS})

    def password(self, user: str) -> str:
        """Return ``user``'s password; raise KeyError for a user of neither account."""
        return {**self.monitors, **self.publishers, **self.agents, **self.aggregators}[user]

    def config(self) -> str:
        """Return the ``accounts`` block of a NATS server config for these users."""
        # Monitors read the job documents too (as deploy/mosquitto/acl lets them), though nothing publishes them
        # in this account yet (docs/jobs.md).
        monitors = [self._user(u, p, publish=["rainier.v1.events.>", _status(u)],
                               subscribe=[*(s.format("telemetry") for s in _BELOW),
                                          *(s.format("jobs") for s in _BELOW),
                                          *(s.format("status") for s in _BELOW), "rainier.v1.events.>", _QOS1])
                    for u, p in self.monitors.items()]
        publishers = [self._user(u, p, publish=[f"{_TELEMETRY}.>", "rainier.v1.truth.>", _status(u)],
                                 subscribe=["rainier.v1.events.>", _QOS1])
                      for u, p in self.publishers.items()]
        # A node agent writes its own node's telemetry, in either topic layout, never a batch (which would
        # carry every node of a bucket): the same rule as deploy/mosquitto/acl.  Deny beats allow in NATS.
        agents = [self._user(u, p, publish=[f"{_TELEMETRY}.*.*.*.{u}", f"{_TELEMETRY}.*.*.{u}", _status(u)],
                             deny=[f"{_TELEMETRY}.*.batch.>", f"{_TELEMETRY}.*.*.batch.>"],
                             subscribe=["rainier.v1.events.>", _QOS1])
                  for u, p in self.agents.items()]
        # An aggregator reads node frames (never a batch: it would hear its own) and writes batch frames; it
        # lives in AGENTS beside the agents it hears, and its batches reach the monitors by the same export.
        aggregators = [self._user(u, p, publish=[f"{_TELEMETRY}.*.*.batch.*", _status(u)],
                                  subscribe=[f"{_TELEMETRY}.*.*.*.*", "rainier.v1.events.>", _QOS1])
                       for u, p in self.aggregators.items()]
        return (
            "accounts {\n"
            "  MONITORS {\n"
            "    jetstream: enabled\n"
            f"    users: [\n{''.join(monitors)}    ]\n"
            f'    imports: [{{stream: {{account: AGENTS, subject: "{_TELEMETRY}.>"}}}}]\n'
            '    exports: [{stream: "rainier.v1.events.>"}]\n'
            "  }\n"
            "  AGENTS {\n"
            "    jetstream: enabled\n"
            f"    users: [\n{''.join(publishers + agents + aggregators)}    ]\n"
            f'    exports: [{{stream: "{_TELEMETRY}.>"}}]\n'
            '    imports: [{stream: {account: MONITORS, subject: "rainier.v1.events.>"}}]\n'
            "  }\n"
            "}\n"
        )

    @staticmethod
    def _user(user: str, password: str, *, publish: list[str], subscribe: list[str],
              deny: list[str] | None = None) -> str:
        allow = {"allow": publish, **({"deny": deny} if deny else {})}
        permissions = {"publish": allow, "subscribe": {"allow": subscribe}}
        # JSON is valid NATS config syntax, and quotes every subject and password safely.
        entry = {"user": user, "password": password, "permissions": permissions}
        return f"      {json.dumps(entry)}\n"
