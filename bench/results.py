"""Keep bench/RESULTS.md as one section per benchmark, each rewritten by its own script."""

from __future__ import annotations

import os
import re

HEADER = "# Benchmark results\n\nEach section is written by the script it names (`make bench` runs them all).\n"


def update_section(path: str, title: str, body: str) -> None:
    text = open(path).read() if os.path.exists(path) else HEADER
    block = f"## {title}\n\n{body.rstrip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: block + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + block
    with open(path, "w") as f:
        f.write(text)
