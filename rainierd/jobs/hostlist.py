"""Slurm hostlist expressions, expanded: ``trn2-[001-064]`` is 64 hosts,
``a[1-3,7],b5`` is ``a1 a2 a3 a7 b5``, ``rack[1-2]-n[01-02]`` the four
combinations.

A range keeps the zero padding of its lower bound, as Slurm does
(``[008-011]`` is ``008 009 010 011``).  Commas inside brackets separate
ranges, commas (or spaces) outside separate names.  What an expression would
expand to is counted before anything is built, so ``n[0-99999999]`` is
refused at once instead of filling memory.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from rainierd.errors import JobError

_RANGE_RE: Final = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?", re.ASCII)


def _split_top(expression: str) -> list[str]:
    """Return the comma- or space-separated items of ``expression`` outside brackets; raise JobError if the
    brackets do not balance."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "[":
            depth += 1
            if depth > 1:
                raise JobError("hostlist", f"nested brackets in {expression[:200]!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise JobError("hostlist", f"']' without '[' in {expression[:200]!r}")
        elif char in ", " and depth == 0:
            items.append(expression[start:i])
            start = i + 1
    if depth:
        raise JobError("hostlist", f"'[' without ']' in {expression[:200]!r}")
    items.append(expression[start:])
    return [item for item in items if item]


def _ranges(body: str, expression: str) -> list[tuple[int, int, int]]:
    """Return (low, high, width) of each range of one bracket's ``body``."""
    out = []
    for part in body.split(","):
        m = _RANGE_RE.fullmatch(part.strip())
        if m is None:
            raise JobError("hostlist", f"[{body[:100]}] is not a list of ranges in {expression[:200]!r}")
        low, high = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if high < low:
            raise JobError("hostlist", f"range {part!r} runs backwards in {expression[:200]!r}")
        out.append((low, high, len(m[1])))
    return out


def expand_hostlist(expression: str, *, max_hosts: int) -> list[str]:
    """Return the host names of a Slurm hostlist expression, in order (an empty expression: none).

    Raises JobError (``hostlist``) for a malformed expression or one naming
    more than ``max_hosts`` hosts.
    """
    hosts: list[str] = []
    for item in _split_top(expression.strip()):
        pieces = re.split(r"\[([^\]]*)\]", item)  # literal, bracket body, literal, ...
        literals, groups = pieces[0::2], [_ranges(body, expression) for body in pieces[1::2]]
        count = 1
        for group in groups:
            count *= sum(high - low + 1 for low, high, _ in group)
        if len(hosts) + count > max_hosts:
            raise JobError("hostlist", f"{expression[:200]!r} names more than {max_hosts:,} hosts")
        choices = [[f"{n:0{width}d}" for low, high, width in group for n in range(low, high + 1)]
                   for group in groups]
        for combination in itertools.product(*choices):
            name = literals[0] + "".join(number + literal
                                         for number, literal in zip(combination, literals[1:], strict=True))
            hosts.append(name)
    return hosts
