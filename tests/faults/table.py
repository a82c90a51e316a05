"""The fault table as Markdown, and `--readme`: put build/faults.json between the README's markers."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BEGIN, END = "<!-- faults-table:begin -->", "<!-- faults-table:end -->"
ORDER = ("baseline", "backends", "storage", "processes", "user code", "dashboard", "bad input", "security")


_TMP = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+/[^/\s]+/")  # a test's own temporary directory


def _cell(text: str) -> str:
    return _TMP.sub("", str(text)).replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: ORDER.index(r["area"]) if r["area"] in ORDER else len(ORDER))
    out = ["| area | fault or bad input | what happened to training | what was lost |", "|---|---|---|---|"]
    out += [f"| {_cell(r['area'])} | {_cell(r['fault'])} | {_cell(r['training'])} | {_cell(r['lost'])} |" for r in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default=os.path.join(ROOT, "build", "faults.json"))
    ap.add_argument("--readme", action="store_true", help="write the table into README.md between its markers")
    args = ap.parse_args(argv)
    try:
        with open(args.rows) as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        print(f"table.py: cannot read {args.rows}: {e} (run `make faults` first)", file=sys.stderr)
        return 1
    table = markdown(rows)
    print(table)
    if args.readme:
        path = os.path.join(ROOT, "README.md")
        text = open(path).read()
        if BEGIN not in text or END not in text:
            print(f"table.py: README.md has no {BEGIN} ... {END} markers", file=sys.stderr)
            return 1
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(path, "w") as f:
            f.write(f"{head}{BEGIN}\n{table}\n{END}{tail}")
        print(f"table.py: {len(rows)} rows written into README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
