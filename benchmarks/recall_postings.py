"""Where the recall index's SAI postings come from, for ``bench_projections``' event mix (no services).

    .venv/bin/python -m benchmarks.recall_postings [--events 20000] [--sessions 200]

Each token of a ``recall_docs`` / ``recall_chunks`` row is one SAI posting, and
postings are what indexing costs Cassandra (about 8 µs of its CPU each on a
2-core box: most of it SAI's memtable index, its flush and the GC they cause).
Prints, per event: the postings of each kind of document, the part a document
posts more than once (a token in several of its chunks), the session tokens, and
the kind of token posted (holding a digit, non-ASCII such as CJK bigrams, a word). The floor of
a document-level index (every distinct token of a document posted once) is the
postings minus the repeats.

On the benchmark's mix (20k events) that floor is within 4% of what is posted:
the 50 KB tool results post ~2,900 tokens each, ~2,750 of them distinct (the
mix's ``w12345`` ids), so posting a token once per document instead of once per
chunk would save ~6 postings of ~182 per event, and dropping the session token
under 1.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.bench_projections import make_events
from projections.lexical import SESSION_TOKEN_PREFIX
from projections.rows import recall_rows
from schemas import SessionEvent
from schemas.records import json_object, parse_event_data

LARGE = 40_000
"""Characters from which a tool result counts as large (the mix's 50 KB results)."""


def kind_of_document(event: SessionEvent) -> str:
    role = event.message.role
    return f"{role} (large)" if role == "tool" and len(event.message.content or "") >= LARGE else role


def kind_of_token(token: str) -> str:
    if token.startswith(SESSION_TOKEN_PREFIX):
        return "session token"
    if not token.isascii():
        return "non-ASCII (CJK bigrams, accented words)"
    return "holding a digit" if any(c.isdigit() for c in token) else "word"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--sessions", type=int, default=200)
    args = ap.parse_args()
    records, _, _ = make_events(args.events, args.sessions)
    docs: Counter[str] = Counter()
    postings: Counter[str] = Counter()
    repeats: Counter[str] = Counter()
    rows: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for record in records:
        event = parse_event_data(json_object(record.value or b""))
        built = recall_rows(event, record.offset) if isinstance(event, SessionEvent) else None
        if built is None:
            continue
        kind = kind_of_document(event)
        sets = [built.doc[12], *(chunk[13] for chunk in built.chunks)]
        sets = [s for s in sets if isinstance(s, set)]
        distinct = set().union(*sets)
        docs[kind] += 1
        rows[kind] += len(sets)
        postings[kind] += sum(len(s) for s in sets)
        repeats[kind] += sum(len(s) for s in sets) - len(distinct)
        for s in sets:
            tokens.update(kind_of_token(t) for t in s)
    n = len(records)
    total = sum(postings.values())
    print(f"{n} events, {total / n:.1f} postings per event, {sum(repeats.values()) / n:.1f} of them repeats "
          f"(a token posted again by a later chunk of its document)")  # fmt: skip
    head = ("docs", "rows/doc", "postings/doc", "per event", "repeats/doc")
    print(f"  {'document':16s} " + " ".join(f"{h:>12s}" for h in head))
    for kind, count in docs.most_common():
        cells = (count, rows[kind] / count, postings[kind] / count, postings[kind] / n, repeats[kind] / count)
        print(f"  {kind:16s} " + " ".join(f"{c:12.1f}" if isinstance(c, float) else f"{c:12d}" for c in cells))
    print("  postings per event by token:", ", ".join(f"{k} {v / n:.1f}" for k, v in tokens.most_common()))


if __name__ == "__main__":
    main()
