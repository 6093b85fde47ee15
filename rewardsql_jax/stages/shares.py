"""How the processes of a pod share a sampling stage's questions (DESIGN.md, "Sampling on a pod").

The questions are cut into fixed chunks; chunk ``c`` goes to process ``c mod P`` and is sampled with seeds that
depend on ``c`` alone, so any number of processes computes the same results as one. Each process writes its
share to the shared run directory, and after a barrier every process reads all of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from rewardsql_jax.distributed import barrier, is_primary, process_count, process_index


def owned_chunks(n_items: int, chunk_size: int) -> list[int]:
    """The chunks of ``chunk_size`` consecutive items this process computes (chunk c on process c mod P)."""
    return list(range(process_index(), -(-n_items // chunk_size), process_count()))


def exchange_shares(out_dir: Path, name: str, mine) -> list:
    """Every process's ``mine`` (JSON-serialisable), in process order, on every process. With one process no
    file is written; with several each writes ``<name>.part<i>.json`` and the primary removes them once all
    have read them."""
    if process_count() == 1:
        return [mine]
    out_dir = Path(out_dir)
    (out_dir / f"{name}.part{process_index()}.json").write_text(json.dumps(mine))
    barrier(f"{name} shares written")
    shares = [json.loads((out_dir / f"{name}.part{i}.json").read_text()) for i in range(process_count())]
    barrier(f"{name} shares read")
    if is_primary():
        for i in range(process_count()):
            (out_dir / f"{name}.part{i}.json").unlink()
    return shares


def in_chunk_order(shares: list, chunk_size: int, n_items: int) -> list:
    """The items of every share (``{"chunks": [...], "items": [...]}``, each chunk's items in order) in item
    order."""
    by_chunk = {}
    for share in shares:
        it = iter(share["items"])
        for c in share["chunks"]:
            by_chunk[c] = [next(it) for _ in range(min(chunk_size, n_items - c * chunk_size))]
    return [x for c in sorted(by_chunk) for x in by_chunk[c]]
