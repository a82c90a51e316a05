"""The manual builds (`mkdocs build --strict`, as mkdocs.yml asks), and its generated reference pages hold
what the code holds: every exit code, setting, metric and CLI subcommand and flag. The README stays a
front page.

The site is built once, in this process, into a temporary directory (about 2 s here). A warning fails
the build: a broken link or anchor, a docstring mkdocstrings cannot render, a Config field without the
comment the settings page is made from.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import logging
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _reference_module():
    spec = importlib.util.spec_from_file_location(
        "mkdocs_reference", os.path.join(ROOT, "scripts", "mkdocs_reference.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before it runs: its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


REF = _reference_module()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built manual's pages as plain text, by path (reference/cli.html, ...)."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # Material's notice about its successor, on stderr
    config = load_config(os.path.join(ROOT, "mkdocs.yml"), site_dir=str(out), strict=True)
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = Collect()
    logging.getLogger("mkdocs").addHandler(handler)
    try:
        build(config)  # strict: raises mkdocs.exceptions.Abort after any warning
    finally:
        logging.getLogger("mkdocs").removeHandler(handler)
    assert not warnings, warnings
    pages = {}
    for dirpath, _, names in os.walk(out):
        for name in names:
            if name.endswith(".html"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    pages[os.path.relpath(path, out)] = f.read()
    return pages


def plain(fragment: str) -> str:
    """HTML as plain text, elements separated by spaces."""
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def text(page: str) -> str:
    """A page's article (not the navigation) as plain text."""
    return plain(page[page.index("<article") : page.index("</article>")])


def test_every_page_of_the_nav_is_built_and_the_api_is_rendered(site):
    for page in ("index.html", "install.html", "detectors.html", "faults-table.html", "runbook.html"):
        assert page in site
    api = site["reference/python-api.html"]
    for name in ("init", "step", "phase", "log", "watch", "checkpoint", "shutdown", "stats", "Config"):
        assert f'id="telemetry.{name}"' in api, name
    for method in ("write", "progress", "findings", "flush", "close", "stats", "describe"):
        assert f'id="telemetry.pipeline.sinks.Sink.{method}"' in api, method


def test_no_page_loads_anything_from_elsewhere(site):
    for name, page in site.items():
        loads = re.findall(r'<(?:script|link|img)[^>]*?(?:src|href)="(https?:)?//[^"]*"', page)
        stylesheets = [m for m in re.findall(r"<link[^>]*>", page) if re.search(r'href="(https?:)?//', m)]
        assert not loads and not stylesheets, (name, loads, stylesheets)


def test_exit_codes_page_lists_every_code(site):
    from telemetry.exitcodes import CODES

    page = text(site["reference/exit-codes.html"])
    for code, meaning in CODES.items():
        assert re.search(rf"\b{int(code)}\s+{code.name}\b", page), code
        assert " ".join(meaning.split()) in " ".join(page.split()), meaning


def test_settings_page_lists_every_setting_with_its_variable_default_and_meaning(site):
    from telemetry.config import ENV_PREFIX, Config

    page = " ".join(text(site["reference/settings.html"]).split())
    settings = REF.config_settings()
    assert [s.name for s in settings] == [f.name for f in dataclasses.fields(Config)]
    for s in settings:
        assert s.comment, f"Config.{s.name} has no comment on its line in telemetry/config.py"
        row = f"{s.name} {ENV_PREFIX}{s.name.upper()}"
        assert row in page, row
        assert html.unescape(REF._text(s.comment)).replace("\\", "") in page, s.comment
        default = REF._env_value(s.default)
        assert f"{row} {s.type} {default or '(empty)'}" in page, (s.name, default)


def test_a_setting_without_its_comment_is_caught():
    """The check above can fail: a field with no comment comes back with an empty one."""
    settings = {s.name: s for s in REF.config_settings(_Documented)}
    assert settings["said"].comment == "what it is"
    assert settings["said"].section == "A section"
    assert settings["wrapped"].comment == "a long comment the formatter moved inside the parentheses"
    assert settings["unsaid"].comment == ""


@dataclasses.dataclass(frozen=True)
class _Documented:
    # A section
    said: int = 1  # what it is
    wrapped: tuple[int, ...] = (
        1,  # a long comment the formatter moved inside the parentheses
    )
    unsaid: int = 2


def test_metrics_page_lists_every_metric_and_series(site):
    from telemetry.metrics import names

    page = text(site["reference/metrics.html"])
    for m in names.ALL:
        assert re.search(rf"\b{m.name}\b", page), m.name
        for series in m.series:
            assert re.search(rf"\b{series}\b", page), series
        row = re.search(rf"\b{m.name}\s+{m.kind}\b", page)
        assert row, f"{m.name}: its kind {m.kind} is not beside it"
    for label in names.BASE_LABELS:
        assert label in page


def _commands(parser: argparse.ArgumentParser, prefix: str = "telemetry"):
    """(full command, its parser) for every subcommand, at every depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


def test_cli_page_lists_every_subcommand_and_flag(site):
    from telemetry.cli import build_parser

    raw = site["reference/cli.html"]
    commands = list(_commands(build_parser()))
    assert {"telemetry demo", "telemetry analyze", "telemetry diff", "telemetry dashboard"} <= {c for c, _ in commands}
    for command, parser in commands:
        slug = command.replace(" ", "-")
        assert f'id="{slug}"' in raw, f"no heading for {command}"
        section = re.split(r"<h[2-4]", raw.split(f'id="{slug}"', 1)[1], maxsplit=1)[0]
        assert f"usage: {command}" in plain(section), command
        # The first cell of each row of the section's table names an argument ("--steps", "-o, --out", "path").
        listed = {n for cell in re.findall(r"<tr>\s*<td><code>(.*?)</code>", section) for n in cell.split(", ")}
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            for flag in action.option_strings or [action.metavar or action.dest]:
                assert flag in listed, f"{command}: {flag} is not in its table ({sorted(listed)})"


PAGE_BYTES = 25_000  # a page of the manual at most: past that it wants splitting by topic


def test_no_page_of_the_manual_is_over_25_kb():
    """Every page's source, docs/ and the pages generated at build time alike, is at most PAGE_BYTES."""
    sizes = {}
    docs = os.path.join(ROOT, "docs")
    for dirpath, _, names in os.walk(docs):
        for name in names:
            if name.endswith(".md"):
                path = os.path.join(dirpath, name)
                sizes[os.path.relpath(path, ROOT)] = os.path.getsize(path)
    for path, page in REF.PAGES.items():
        sizes[f"{path} (generated)"] = len(page().encode("utf-8"))
    assert len(sizes) > len(REF.PAGES) and all(f"{p} (generated)" in sizes for p in REF.PAGES)
    over = {page: size for page, size in sorted(sizes.items()) if size > PAGE_BYTES}
    assert not over, f"pages over {PAGE_BYTES:,} bytes (split them by topic): " + ", ".join(
        f"{page} {size:,} bytes" for page, size in over.items()
    )


def test_readme_is_a_front_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= 250, f"README.md is {len(lines)} lines: the manual lives in docs/"
    head = "\n".join(lines[:12])
    assert "make demo" in head and "make test" in head
    long_rows = [i + 1 for i, line in enumerate(lines) if line.startswith("|") and len(line) > 200]
    assert not long_rows, f"README.md table rows over 200 characters at lines {long_rows}"
    pictures = re.findall(r"!\[[^\]]*\]\((docs/[^)]+\.png)\)", "\n".join(lines))
    assert pictures and all(os.path.exists(os.path.join(ROOT, p)) for p in pictures), pictures
    for target in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert os.path.exists(os.path.join(ROOT, target)), f"README.md links to {target}, which does not exist"
