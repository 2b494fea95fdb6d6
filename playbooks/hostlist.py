"""Slurm host lists (``node[1-3,7],gpu-a[01-02]``) expanded to node names, as ``scontrol show hostnames``
does, without a process per job."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"host list {text!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"host list {text!r}: unbalanced '['")
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out = []
    for piece in m.group(1).split(","):
        r = _RANGE.match(piece.strip())
        if not r:
            raise ValueError(f"host list {item!r}: bad range {piece!r}")
        lo, hi = r.group(1), r.group(2) or r.group(1)
        width = len(lo) if lo.startswith("0") else 0
        if int(hi) < int(lo) or int(hi) - int(lo) > 100_000:
            raise ValueError(f"host list {item!r}: bad range {piece!r}")
        for k in range(int(lo), int(hi) + 1):
            out += _expand_one(f"{head}{k:0{width}d}{tail}")
    return out


def expand(hostlist: str | None) -> tuple[str, ...]:
    """Node names of a Slurm host list, in order; ValueError for a malformed one."""
    if not hostlist or hostlist in ("(null)", "None"):
        return ()
    out: list[str] = []
    for item in _split_top(hostlist.strip()):
        out += _expand_one(item)
    return tuple(out)
