"""A third-party node agent for rainierd, written from docs/publishing.md alone.

It publishes one trn2.48xlarge node's telemetry as JSON frames, once a tick,
with made-up but steady values: every chip busy at --util, executing FLOP at
that rate of its FP8 peak, every link and port healthy.  Run one per node:

    python examples/publisher.py --url mqtt://127.0.0.1:1883 --inventory fleet.toml --hostname ip-10-0-17-8
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

PEAK = 1.299e15  # FP8 dense FLOP/s of a Trainium2 chip
CHIPS, LINKS = 16, 48  # per node: 32 torus + 16 ring NeuronLinks (EFA ports: the inventory's, 16 unless it says)
BUCKETS = 256  # topics name the UltraServer's bucket, u % 256, so monitor shards receive their share
LINK_BW = [256e9] * 32 + [128e9] * 16  # nominal bytes/s of each of the node's links, in id order


def node_ids(inventory: str, hostname: str) -> tuple[int, int, int, int]:
    """Return (site, UltraServer, node, EFA ports a node) of ``hostname``, numbered as docs/publishing.md says."""
    with open(inventory, "rb") as f:
        doc = tomllib.load(f)
    us = 0
    for site, entry in enumerate(doc["site"]):
        for ultraserver in entry["ultraserver"]:
            for node in ultraserver["node"]:
                if node.get("hostname") == hostname:
                    return site, us, 4 * us + node["index"], doc.get("efa_ports_per_node", 16)
            us += 1
    raise SystemExit(f"{hostname} is not in {inventory}")


def frame(args: argparse.Namespace, node: int, ports: int, seq: int, *, t_s: float, elapsed_s: float) -> dict:
    """Return the node's JSON frame for one tick; counters are totals since this process started."""
    flop = PEAK * args.util * elapsed_s
    chips = [{"chip": node * CHIPS + c, "util": args.util, "clock_ratio": 1.0, "throttled": False,
              "temp_c": 61.5, "power_w": 410.0, "hbm_used_bytes": 80 * 2**30, "fp8_flop_total": flop,
              "ecc_corrected_total": 0, "ecc_uncorrected_total": 0} for c in range(CHIPS)]
    links = [{"link": node * LINKS + k, "tx_bytes_total": int(0.25 * bw * elapsed_s), "bw_bytes_s": 0.96 * bw,
              "lanes_up": 8, "crc_errors_total": 0, "replay_total": 0, "latency_us": 1.5 if k < 32 else 2.5}
             for k, bw in enumerate(LINK_BW)]
    moved = int(5e9 * elapsed_s)
    efa = [{"port": node * ports + p, "tx_bytes_total": moved, "rx_bytes_total": moved, "retrans_bytes_total": 0,
            "retrans_pkts_total": 0, "retrans_timeout_events_total": 0, "unresponsive_remote_events_total": 0,
            "impaired_remote_conn_events_total": 0, "latency_us": 12.0} for p in range(ports)]
    return {"v": 1, "kind": "node", "publisher": args.publisher_id or args.hostname, "seq": seq,
            "tick": args.tick_start + seq,
            "t_s": t_s, "node": node, "chips": chips, "links": links, "efa": efa,
            "cooling": {"inlet_c": 22.0, "outlet_c": 29.0, "fan_rpm": 6500.0, "power_w": 8600.0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="mqtt://host:port")
    parser.add_argument("--inventory", required=True, help="the fleet's inventory TOML (the monitor's --topology)")
    parser.add_argument("--hostname", required=True, help="this node's hostname in the inventory")
    parser.add_argument("--publisher-id", help="publisher id in frames (default: the hostname)")
    parser.add_argument("--tick", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--ticks", type=int, default=0, help="stop after this many (0: never)")
    parser.add_argument("--tick-start", type=int, default=0, help="this agent's first tick number")
    parser.add_argument("--clock-skew", type=float, default=0.0, help="seconds added to this host's clock")
    parser.add_argument("--util", type=float, default=0.6, help="NeuronCore utilisation of every chip")
    parser.add_argument("--skip", default="", help="comma-separated sequence numbers not to send (a test's loss)")
    args = parser.parse_args()
    site, us, node, ports = node_ids(args.inventory, args.hostname)
    skip = {int(s) for s in args.skip.split(",") if s}
    url = urlsplit(args.url)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"agent-{args.hostname}-{time.time_ns()}")
    client.connect(url.hostname or "127.0.0.1", url.port or 1883)
    client.loop_start()
    topic = f"rainier/v1/telemetry/s{site}/b{us % BUCKETS}/u{us}/n{node}"
    started = time.time()
    seq = 0  # +1 a frame, from 0 at every start of this process (docs/publishing.md: restarts)
    while args.ticks == 0 or seq < args.ticks:
        now = time.time()  # one clock for the sample time and the counters, so their rates are exact
        if seq not in skip:
            body = frame(args, node, ports, seq, t_s=now + args.clock_skew, elapsed_s=now - started)
            client.publish(topic, json.dumps(body), qos=1).wait_for_publish(10)
        seq += 1
        time.sleep(max(0.0, started + seq * args.tick - time.time()))
    client.loop_stop()
    client.disconnect()


if __name__ == "__main__":
    main()
