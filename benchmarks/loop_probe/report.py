"""Per fetch cycle, what a probed worker's event loops did (see ``benchmarks/loop_probe/sitecustomize.py``).

Reads the probe's files, takes the one that fetched records (the worker), finds its longest
stretch of at least 300 fetched events/s (the paced phase) and the quiet seconds before it (the
idle phase), and prints for each the counters per second and per non-empty fetch, and the CPU of
each thread (ms per second and per fetch).

    .venv/bin/python -m benchmarks.loop_probe.report /tmp/probe.*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HOT = 300
"""Fetched events per second that count as the paced phase."""
TICK_MS = 10.0
"""Milliseconds per ``/proc`` CPU tick (``SC_CLK_TCK`` = 100)."""


def window(rows: list[dict[str, Any]], lo: int, hi: int, label: str) -> None:
    seconds = rows[hi]["t"] - rows[lo]["t"]
    first, last = rows[lo]["c"], rows[hi]["c"]
    delta = {k: v - first.get(k, 0) for k, v in last.items()}
    events, cycles = delta.get("fetched_records_msgs", 0), delta.get("fetched_records_nonempty", 0)
    main = str(rows[lo]["main"])
    cpu = {t: (v - rows[lo]["cpu_ticks"].get(t, 0)) * TICK_MS for t, v in rows[hi]["cpu_ticks"].items()}
    print(f"== {label}: {seconds:.1f} s, {events} events, {cycles} non-empty fetches "
          f"({events / max(cycles, 1):.1f} events each), {events / seconds:.0f} events/s")  # fmt: skip
    others = ", ".join(f"{t}: {v / seconds:.1f}" for t, v in sorted(cpu.items()) if t != main and v)
    print(f"   CPU ms/s: main thread {cpu.get(main, 0) / seconds:.1f}; others {others or '-'}")
    if cycles:
        rest = sum(v for t, v in cpu.items() if t != main)
        print(f"   CPU ms per non-empty fetch: main thread {cpu.get(main, 0) / cycles:.2f}, others {rest / cycles:.2f}")
    for key, value in sorted(delta.items(), key=lambda kv: (kv[0].split(".")[0], -kv[1])):
        if value:
            per = f"{value / cycles:8.2f}/fetch" if cycles else ""
            print(f"   {key:90s} {value / seconds:9.1f}/s {per}")


def main(paths: list[str]) -> None:
    for path in paths:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
        fetched = [r["c"].get("fetched_records_msgs", 0) for r in rows]
        runs: list[list[int]] = [[]]
        for i in range(1, len(rows)):
            if fetched[i] - fetched[i - 1] >= HOT:
                runs[-1].append(i)
            elif runs[-1]:
                runs.append([])
        paced = max(runs, key=len)
        if len(paced) < 4:
            continue  # not the worker, or no paced phase
        print(f"# {path}")
        quiet_end = paced[0] - 2
        quiet_start = quiet_end
        while quiet_start > 0 and fetched[quiet_start - 1] == fetched[quiet_end] and quiet_end - quiet_start < 8:
            quiet_start -= 1
        if quiet_end > quiet_start:
            window(rows, quiet_start, quiet_end, "idle")
        window(rows, paced[0] + 1, paced[-1] - 1, "paced")


if __name__ == "__main__":
    main(sys.argv[1:])
