"""``telemetry compact``: merge a run directory's sealed segments, rank by rank (a finished run, a
simulated one, or one written before the writer compacted while running)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from .common import EXIT_OUTPUT, EXIT_USAGE

RANK_NAME = re.compile(r"^rank-(\d+)\.")


def cmd_compact(args: argparse.Namespace) -> int:
    from ..store import compact, layout
    from ..store.claim import RankInUse, claim_rank
    from ..store.segments import listing

    if not layout.is_run_dir(args.run_dir):
        print(
            f"telemetry compact: {args.run_dir!r} is not a run directory (no ranks/ or meta.json in it)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    t0 = time.monotonic()
    before = _count(args.run_dir)
    made, busy, failed = 0, [], []
    # one listing for every rank (a listing per rank reads the whole directory each time: ranks x files)
    try:
        names = os.listdir(os.path.join(args.run_dir, layout.RANKS_DIR))
    except FileNotFoundError:
        names = []
    by_rank: dict[int, list[str]] = {}
    for name in names:  # each rank's own names: its listing parses its few files, not the run's
        m = RANK_NAME.match(name)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(name)
    for rank in sorted(listing(args.run_dir, names)):
        try:
            claim = claim_rank(args.run_dir, rank)  # its writer compacts a live rank itself
        except RankInUse:
            busy.append(rank)
            continue
        try:
            made += compact.compact_rank(
                args.run_dir,
                rank,
                args.segments,
                lambda group, exc, r=rank: failed.append(f"rank {r} {group[0]}-{group[-1]}: {exc}"),
                by_rank.get(rank, []),
            )
        except OSError as exc:
            failed.append(f"rank {rank}: {exc}")
        finally:
            if claim is not None:
                claim.release()
    after = _count(args.run_dir)
    print(
        f"{args.run_dir}: {before} segment files -> {after} ({made} compacted segments written) "
        f"in {time.monotonic() - t0:.1f} s"
    )
    if busy:
        print(f"ranks being written by a live process, left to it: {_ranks(busy)}")
    for line in failed:
        print(f"telemetry compact: left as it was: {line}", file=sys.stderr)
    if not busy and not failed:  # a long run's analysis from its blocks, kept: read in a second from now on
        from ..analysis.longrun.blockrun import keep

        t1 = time.monotonic()
        print(f"{args.run_dir}: {keep(args.run_dir)} ({time.monotonic() - t1:.1f} s)")
    return EXIT_OUTPUT if failed else 0


def _count(run_dir: str) -> int:
    from ..store import layout

    try:
        return sum(1 for n in os.listdir(os.path.join(run_dir, layout.RANKS_DIR)) if layout.SEQ_RE.match(n))
    except FileNotFoundError:
        return 0


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (f" and {len(ranks) - 20} more" if len(ranks) > 20 else "")
