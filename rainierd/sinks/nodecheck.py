"""``rainierd node-check``: a node-problem-detector custom plugin that asks
the monitor's ``GET /api/v1/actions?node=HOST`` whether this node has an
advisory an automation should act on.

The plugin protocol (node-problem-detector's custom plugin monitor): exit 0
OK, 1 a problem, 2 unknown, and one line on stdout, which becomes the
NodeCondition's message (cut at the config's ``max_output_length``: the line
leads with what matters).  What counts (docs/actions.md, "Where actions go"):

- 1: a ``cordon``, ``drain`` or ``replace`` advisory in state ``proposed``
  and not a dry run (``--dry-run-counts`` makes a dry run's count too, for a
  pipeline whose own consumer is in dry-run mode).
- 0: no advisory; ``watch``, ``reset_link`` and ``reset_port`` (nothing for a node-level
  automation to do); ``pending`` (held: it may be a flap or a checkpoint);
  ``suppressed`` (the brake, or a correlated cause, holds it back: a
  NodeCondition must not route around the brake); ``expired``; a dry run.
  The line still says which.
- 2: the monitor cannot say: unreachable, no answer in time, TLS or
  authentication refused, no analysis yet (503), an answer older than
  ``--max-age`` (the monitor has stopped analysing), or not the document;
  and a node the monitor does not know (404: a hostname its inventory does
  not name, another shard's node), so a hostname mismatch is never read as
  a healthy node.

The line names the node by its canonical id and hostname (``no advisory
for s0/u1/n4 (trn2-a-0004)``: docs/ids.md) as the monitor resolved it.

Time: the whole command ends within ``--timeout`` (default 0.8 s) of its
start, Python's start included as far as the kernel reports it
(``/proc/self/stat``), so a plugin run costs NPD at most a second.  It
imports only the standard library (``rainierd node-check`` is dispatched
before the rest of rainierd loads: rainierd/_start.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from rainierd.http.client import HttpError, Remote, Url, add_connection_arguments, remote, request

OK: Final = 0
PROBLEM: Final = 1
UNKNOWN: Final = 2
DEFAULT_TIMEOUT_S: Final = 0.8
DEFAULT_MAX_AGE_S: Final = 300.0
_DISRUPTIVE: Final = frozenset({"cordon", "drain", "replace"})
_MAX_BODY_BYTES: Final = 1 << 20
_MAX_LINE: Final = 400
_NODE_ENV: Final = "NODE_NAME"  # what node-problem-detector's DaemonSet sets from the downward API


@dataclass(frozen=True, slots=True)
class Verdict:
    """The plugin's exit code and its one line."""

    code: int
    line: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` node-check's options."""
    parser.add_argument("--node", default=None,
                        help=f"this node: its id (s0/u1/n4), its inventory hostname or n<index> "
                             f"(default: ${_NODE_ENV})")
    add_connection_arguments(parser)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"end within this long of the command's start (default {DEFAULT_TIMEOUT_S:g}, at most 1)")
    parser.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE_S, metavar="SECONDS",
                        help="advisories older than this are unknown: the monitor stopped analysing "
                             f"(default {DEFAULT_MAX_AGE_S:g})")
    parser.add_argument("--dry-run-counts", action="store_true",
                        help="count a dry run's proposals as problems too (default: a dry run is OK, with a line)")


def judge(document: Any, node: str, *, now_s: float, max_age_s: float, dry_run_counts: bool) -> Verdict:
    """Return the verdict on ``node`` of one ``/api/v1/actions?node=`` document."""
    if not isinstance(document, dict) or not isinstance(document.get("actions"), list):
        return Verdict(UNKNOWN, "the monitor's answer is not an actions document")
    t_s = document.get("t_s")
    if isinstance(t_s, (int, float)) and now_s - t_s > max_age_s:
        return Verdict(UNKNOWN, f"the monitor's advisories are {now_s - t_s:.0f} s old (analysis stalled?)")
    mine = [a for a in document["actions"] if isinstance(a, dict)]
    if not mine:
        return Verdict(OK, f"no advisory for {_named(document.get('node'), node)}")
    advisory = mine[0]
    action, state = str(advisory.get("action", "?")), str(advisory.get("state", "?"))
    reason = " ".join(str(advisory.get("reason", "")).split())
    dry_run = document.get("dry_run") is True
    what = f"{action} {state}"
    if state == "suppressed":
        what += f" by {advisory.get('suppressed_by') or 'the policy'}"
    if advisory.get("lemon") is True:
        what += " (lemon)"
    if action in _DISRUPTIVE and state == "proposed" and (not dry_run or dry_run_counts):
        return Verdict(PROBLEM, _line(f"{what}{' (dry run)' if dry_run else ''}: {reason}"))
    return Verdict(OK, _line(f"{'dry run: ' if dry_run and state == 'proposed' else ''}{what}: {reason}"))


def _named(named: object, asked: str) -> str:
    """Return the node as the monitor resolved it, ``s0/u1/n4 (trn2-a-0004)``, or as it was asked."""
    if not isinstance(named, dict) or not isinstance(named.get("id"), str):
        return asked
    hostname = named.get("hostname")
    return f"{named['id']} ({hostname})" if isinstance(hostname, str) else str(named["id"])


def _line(text: str) -> str:
    return text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."


def _started_s_ago() -> float:
    """Return how long ago the kernel started this process (0 where it cannot say)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as uptime:
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])
            return max(0.0, float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


async def check(url: Url, node: str, *, ssl_context: ssl.SSLContext | None, authorization: str | None,
                budget_s: float, max_age_s: float = DEFAULT_MAX_AGE_S, dry_run_counts: bool = False) -> Verdict:
    """Return the verdict on ``node`` from the monitor at ``url`` within ``budget_s``; never raises for what
    the monitor answers or fails to."""
    where = url.origin
    target = url.with_target("/api/v1/actions?" + urllib.parse.urlencode({"node": node, "limit": 1}))
    headers = {"Accept": "application/json", "User-Agent": "rainierd-node-check"}
    if authorization is not None:
        headers["Authorization"] = authorization
    try:
        async with asyncio.timeout(budget_s):
            response = await request(target, headers=headers, ssl_context=ssl_context, max_body_bytes=_MAX_BODY_BYTES)
    except TimeoutError:
        return Verdict(UNKNOWN, f"monitor {where} did not answer within {budget_s:.2f} s")
    except ConnectionRefusedError:
        return Verdict(UNKNOWN, f"monitor {where} unreachable: connection refused")
    except ssl.SSLError as exc:
        return Verdict(UNKNOWN, f"monitor {where}: TLS failed: {exc.reason or exc}")
    except OSError as exc:
        return Verdict(UNKNOWN, f"monitor {where} unreachable: {exc.strerror or exc}")
    except HttpError as exc:
        return Verdict(UNKNOWN, f"monitor {where}: {exc}")
    if response.status == 401:
        return Verdict(UNKNOWN, f"monitor {where} refused the credentials (401)")
    if response.status == 404:
        return Verdict(UNKNOWN, _line(f"monitor {where} knows no node {node!r}: give its id (s0/u1/n4), its "
                                      "inventory hostname or n<index>"))
    if response.status != 200:
        return Verdict(UNKNOWN, f"monitor {where}: {response.status} {_error_of(response.body) or response.reason}")
    try:
        document = json.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        return Verdict(UNKNOWN, f"monitor {where}: the answer is not JSON")
    return judge(document, node, now_s=time.time(), max_age_s=max_age_s, dry_run_counts=dry_run_counts)


def _error_of(body: bytes) -> str:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    return str(document.get("error", ""))[:200] if isinstance(document, dict) else ""


def _prepare(args: argparse.Namespace) -> Verdict | tuple[Remote, str]:
    """Return what the check needs from the options, or the unknown verdict that they are unusable."""
    node = args.node or os.environ.get(_NODE_ENV)
    if not node:
        return Verdict(UNKNOWN, f"no node: give --node or set {_NODE_ENV}")
    try:
        return remote(args), node
    except ValueError as exc:
        return Verdict(UNKNOWN, str(exc))


def run(args: argparse.Namespace, *, started_s_ago: float = 0.0) -> int:
    """Run the check of parsed ``args``, of a command that started ``started_s_ago``: print the one line, return
    the exit code."""
    prepared = _prepare(args)
    if isinstance(prepared, Verdict):
        verdict = prepared
    else:
        reach, node = prepared
        budget_s = min(float(args.timeout), 1.0) - started_s_ago
        if budget_s <= 0.05:
            verdict = Verdict(UNKNOWN, "no time left to ask the monitor (the host is overloaded?)")
        else:
            verdict = asyncio.run(check(reach.url, node, ssl_context=reach.ssl_context,
                                        authorization=reach.authorization, budget_s=budget_s, max_age_s=args.max_age,
                                        dry_run_counts=args.dry_run_counts))
    print(verdict.line)
    return verdict.code


def main(argv: Sequence[str] | None = None) -> int:
    """``rainierd node-check`` on its own (rainierd/_start.py dispatches here before loading the rest)."""
    parser = argparse.ArgumentParser(prog="rainierd node-check", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error is "unknown" to the plugin protocol, as argparse's 2 already is
        return int(exc.code) if isinstance(exc.code, int) else UNKNOWN
    return run(args, started_s_ago=_started_s_ago())


if __name__ == "__main__":
    sys.exit(main())
