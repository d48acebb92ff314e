"""``python -m benchmarks api --follow-command``'s follower: the command runs in a real tmux terminal with the
monitor's URL in place of ``{url}``, and its process tree's CPU, memory and screen are read while it runs, or
once it has ended."""

from __future__ import annotations

import sys

from benchmarks._follow import follow

URL = "http://127.0.0.1:9"


async def test_a_running_follower_is_measured_while_it_runs() -> None:
    """A command that prints its argument, holds 64 MiB and spins: its screen shows the URL, its tree's RSS and
    its largest process hold the 64 MiB, it used CPU, and it was still running when the time was up."""
    spin = "import sys, itertools; print(sys.argv[1], flush=True); b = b'x' * (64 << 20); any(itertools.repeat(0))"
    report = await follow(f'{sys.executable} -c "{spin}" {{url}}', url=URL, seconds=3.0)
    assert (report["screen_head"], report["ended_early_s"]) == ([URL], None)
    assert report["rss_bytes"]["max"] >= report["largest_process"]["rss_bytes_max"] >= 64 << 20
    assert report["cpu_share_of_one_core"] > 0


async def test_a_follower_that_ends_is_reported_as_ended() -> None:
    """A command that ends at once is not waited for: the report says when it ended, and its last screen."""
    report = await follow("echo {url}", url=URL, seconds=30.0)
    assert report["ended_early_s"] is not None
    assert report["ended_early_s"] < 30.0
    assert report["screen_head"] == [URL, "[exited 0]"]
