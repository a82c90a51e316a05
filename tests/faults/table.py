"""The fault table as Markdown, and `--write`: the manual's page of it, docs/faults-table.md, from build/faults.json."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "faults-table.md")
ORDER = ("baseline", "backends", "storage", "processes", "user code", "dashboard", "bad input", "security")


_TMP = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s]+/")  # a test's own temporary directory


def _cell(text: str) -> str:
    """A table cell: one line, no column break, and outside code spans no emphasis, link or HTML tag."""
    parts = _TMP.sub("", str(text)).replace("|", "\\|").replace("\n", " ").split("`")
    parts[::2] = [p.replace("*", "\\*").replace("[", "\\[").replace("<", "&lt;") for p in parts[::2]]
    return "`".join(parts)


def markdown(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: ORDER.index(r["area"]) if r["area"] in ORDER else len(ORDER))
    out = ["| area | fault or bad input | what happened to training | what was lost |", "|---|---|---|---|"]
    out += [f"| {_cell(r['area'])} | {_cell(r['fault'])} | {_cell(r['training'])} | {_cell(r['lost'])} |" for r in rows]
    return "\n".join(out)


def page(rows: list[dict], made: datetime.date, cores: int | None) -> str:
    """The whole page: what the table is, when and where it was made, and the table."""
    where = f"a machine with {cores} CPU cores" if cores else "a machine"
    return (
        "# Fault table\n\n"
        "<!-- written by `make faults` (tests/faults/table.py --write): do not edit by hand -->\n\n"
        "`make faults` runs `tests/faults/` (real processes, sockets, servers and file systems; also part of "
        "`make test`) and writes this page. Each row is one test: the fault or bad input it made, what happened "
        "to training, and exactly what was lost. [Faults and guarantees](faults.md) says what telemetry "
        "promises and what each area covers.\n\n"
        f"This table is from a run on {where} on {made.isoformat()}, {len(rows)} rows. Step-time ratios are "
        "against a healthy run of the same 2-rank gloo job measured in the same session (the machine is "
        "noisy: ratios under 1 are noise, not speed-ups).\n\n"
        f"{markdown(rows)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default=os.path.join(ROOT, "build", "faults.json"))
    ap.add_argument("--write", action="store_true", help=f"write the table's page, {os.path.relpath(PAGE, ROOT)}")
    ap.add_argument("--readme", action="store_true", dest="write", help=argparse.SUPPRESS)  # its old name
    args = ap.parse_args(argv)
    try:
        with open(args.rows) as f:
            rows = json.load(f)
        made = datetime.date.fromtimestamp(os.stat(args.rows).st_mtime)
    except (OSError, ValueError) as e:
        print(f"table.py: cannot read {args.rows}: {e} (run `make faults` first)", file=sys.stderr)
        return 1
    print(markdown(rows))
    if args.write:
        with open(PAGE, "w") as f:
            f.write(page(rows, made, os.cpu_count()))
        print(f"table.py: {len(rows)} rows written into {os.path.relpath(PAGE, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
