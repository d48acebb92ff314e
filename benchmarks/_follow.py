"""What a follower costs the machine: a command (``rainierd top --url
{url}``, or any other) run in a real terminal — a detached tmux session of
200 x 60 on a tmux server of its own (harness/terminal.py) — for a while, its process tree's CPU
(utime + stime, with the children it has reaped) as a share of one core and
its resident memory (VmRSS, summed over the tree) sampled once a second.

The tree is the tmux pane's process and its descendants, found through
``/proc/<pid>/task/<tid>/children`` at each sample, so a command that starts
short-lived children (a shell loop around curl) is counted too: a child
that has exited is in its parent's cutime and cstime once reaped.  The
sampling runs in a worker thread: the monitor being followed shares this
process's event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from harness.terminal import Terminal

__all__ = ["cpu_shares", "follow", "follower_command", "process_tree", "tree_cpu_s"]

WIDTH: Final = 200
HEIGHT: Final = 60
EXITED: Final = "[exited "  # what harness.terminal's pane shows once the command has ended
SETTLE_S: Final = 10.0  # seconds a follower may take to start (imports, first fetch) before it is "settled"
_SCREEN_LINES: Final = 8  # of the pane's last screen, kept in the report: what the follower showed


def follower_command(template: str, url: str) -> str:
    """Return ``template`` with the monitor's URL for ``{url}``; raise ValueError if it does not ask for it."""
    if "{url}" not in template:
        raise ValueError(f"the follow command {template!r} has no {{url}} for the monitor's URL")
    return template.replace("{url}", url)


def process_tree(root: int, children: Callable[[int], Iterable[int]]) -> list[int]:
    """Return ``root`` and its descendants, each once, parents first (``children(pid)``: a process's children)."""
    seen, order, todo = {root}, [root], [root]
    while todo:
        for child in children(todo.pop()):
            if child not in seen:
                seen.add(child)
                order.append(child)
                todo.append(child)
    return order


def tree_cpu_s(stats: Iterable[str], clock_ticks_per_s: int) -> float:
    """Return the CPU seconds of processes given by their ``/proc/<pid>/stat`` lines: each one's utime, stime and
    its reaped children's cutime and cstime."""
    total = 0
    for stat in stats:
        fields = stat.rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        total += sum(int(f) for f in fields[11:15])
    return total / clock_ticks_per_s


def cpu_shares(samples: list[tuple[float, float, int]], *, settle_s: float) -> dict[str, float | None]:
    """Return the CPU share of one core over all ``samples`` (seconds since the start, CPU seconds, RSS) and over
    those from ``settle_s`` on, once the command has started (None: too few samples)."""
    def share(rows: list[tuple[float, float, int]]) -> float | None:
        if len(rows) < 2 or rows[-1][0] <= rows[0][0]:
            return None
        return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])

    return {"cpu_share_of_one_core": share(samples),
            "cpu_share_of_one_core_settled": share([row for row in samples if row[0] >= settle_s])}


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out.extend(int(c) for c in (task / "children").read_text().split())
    except (OSError, ValueError):  # gone meanwhile
        pass
    return out


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _sample(root: int) -> tuple[float, list[tuple[str, int]]]:
    """Return the tree's CPU seconds and each of its processes' name and VmRSS bytes."""
    stats: list[str] = []
    rows: list[tuple[str, int]] = []
    for pid in process_tree(root, _children):
        stat, status = _read(f"/proc/{pid}/stat"), _read(f"/proc/{pid}/status")
        if stat is None or status is None:
            continue
        stats.append(stat)
        rss = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        rows.append((stat[stat.index("(") + 1:stat.rindex(")")], rss))
    return tree_cpu_s(stats, os.sysconf("SC_CLK_TCK")), rows


async def follow(template: str, *, url: str, seconds: float, sample_s: float = 1.0) -> dict[str, Any]:
    """Run the follower in a real terminal for ``seconds`` and return its CPU share of one core, its tree's RSS
    (max, final: the pane's shell and the command's processes), its largest process's, what ran and its last
    screen.

    Raises ValueError for a template without ``{url}``, FileNotFoundError without tmux.
    """
    command = follower_command(template, url)
    terminal = await asyncio.to_thread(Terminal, ["sh", "-c", command], width=WIDTH, height=HEIGHT)
    try:
        root = await asyncio.to_thread(terminal.pid)
        started = time.monotonic()
        cpu, rows = await asyncio.to_thread(_sample, root)
        samples, seen, ended_s = [(0.0, cpu, sum(r for _n, r in rows))], rows, None
        while time.monotonic() - started < seconds:
            await asyncio.sleep(sample_s)
            cpu, rows = await asyncio.to_thread(_sample, root)
            samples.append((time.monotonic() - started, cpu, sum(r for _n, r in rows)))
            seen = seen + rows
            if EXITED in await asyncio.to_thread(terminal.screen):
                ended_s = samples[-1][0]
                break
        screen = (await asyncio.to_thread(terminal.screen)).rstrip().splitlines()
    finally:
        await asyncio.to_thread(terminal.close)
    name, largest = max(seen, key=lambda row: row[1])
    return {
        "template": template, "terminal": f"tmux {WIDTH}x{HEIGHT}", "seconds": round(samples[-1][0], 1),
        "ended_early_s": ended_s, **cpu_shares(samples, settle_s=SETTLE_S),
        "rss_bytes": {"max": max(r for _t, _c, r in samples), "final": samples[-1][2]},
        "largest_process": {"name": name, "rss_bytes_max": largest},
        "processes": sorted({n for n, _r in seen}),
        "screen_head": [line[:WIDTH] for line in screen if line.strip()][:_SCREEN_LINES],
    }
