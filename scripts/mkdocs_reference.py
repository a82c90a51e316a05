"""The manual's reference pages, generated from the code at build time (a MkDocs hook: mkdocs.yml `hooks:`).

Four pages are written into the build, never into docs/, so none can drift from what it describes:

- reference/exit-codes.md  from telemetry.exitcodes.CODES
- reference/settings.md    from telemetry.config.Config: each field's type, default, TELEMETRY_* variable,
                           and its meaning, the trailing comment on its line in telemetry/config.py
- reference/metrics.md     from telemetry.metrics.names.ALL
- reference/cli.md         from telemetry.cli.build_parser(): every subcommand (and theirs), every flag

A field of Config without a comment is a warning, which `mkdocs build --strict` turns into a failure.
The page functions return Markdown and import nothing from MkDocs: `python scripts/mkdocs_reference.py
settings` prints one page.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import html
import inspect
import io
import logging
import sys
import tokenize
from typing import Any, Iterator

log = logging.getLogger("mkdocs.plugins.telemetry_reference")
GENERATED = "<!-- generated from the code by scripts/mkdocs_reference.py at build time: do not edit -->\n\n"


def _text(s: object) -> str:
    """Plain text for a Markdown table cell: no HTML, no emphasis, no column break."""
    return html.escape(" ".join(str(s).split()), quote=False).replace("|", "\\|").replace("*", "\\*")


def _type(s: object) -> str:
    """A type annotation inside a table cell's code span: a union's `|` as it is (the table extension
    leaves a pipe inside backticks alone, and would show an escaping backslash)."""
    return " ".join(str(s).split())


def _code(s: object) -> str:
    """Text as a code span in a table cell (a `|` inside it escaped, so the table keeps its columns)."""
    s = str(s).replace("|", "\\|")
    return f"`` {s} ``" if "`" in s else f"`{s}`"


# ---- exit codes ----------------------------------------------------------------------------------
def exit_codes_page() -> str:
    from telemetry.exitcodes import CODES

    out = [
        "# Exit codes",
        "",
        GENERATED + "Every `telemetry` command exits with one of these (`telemetry.exitcodes.ExitCode`); "
        "`telemetry --help` lists them too.",
        "",
        "| code | name | meaning |",
        "|---|---|---|",
    ]
    out += [f"| {int(code)} | `{code.name}` | {_text(meaning)} |" for code, meaning in CODES.items()]
    return "\n".join(out) + "\n"


# ---- settings ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Setting:
    name: str
    type: str
    default: Any
    comment: str
    section: str


def config_settings(cls: type | None = None) -> list[Setting]:
    """The fields of a dataclass (default: telemetry.config.Config) in source order, each with the comment
    on its line and the section comment (a comment on a line of its own) above it."""
    if cls is None:
        from telemetry.config import Config as cls
    source = inspect.getsource(sys.modules[cls.__module__])
    tree = ast.parse(source)
    node_cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            alone = not tok.line[: tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out, section, line = [], "", node_cls.lineno
    for node in node_cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            continue
        for n in range(line + 1, node.lineno):  # the last section comment between the fields
            text, alone = comments.get(n, ("", False))
            if alone and text and not text.startswith("-"):
                section = text
        name = node.target.id
        line = node.end_lineno or node.lineno
        # Its comment: on its line, or inside it where the formatter wrapped a long one into parentheses.
        text = next((comments[n][0] for n in range(node.lineno, line + 1) if n in comments), "")
        out.append(Setting(name, ast.unparse(node.annotation), defaults.get(name), text, section))
    return out


def _env_value(value: Any) -> str:
    """A default as its TELEMETRY_* variable would spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def settings_page() -> str:
    from telemetry import config as config_module

    settings = config_settings()
    for s in settings:
        if not s.comment:
            log.warning("telemetry/config.py: Config.%s has no comment on its line: say what it means there", s.name)
    true, false = sorted(config_module._TRUE), sorted(config_module._FALSE)
    out = [
        "# Settings",
        "",
        GENERATED + "Every setting of `telemetry.Config`, in the order of `telemetry/config.py`. A keyword "
        f"argument to `telemetry.init` wins over the environment variable `{config_module.ENV_PREFIX}<NAME>`, "
        "which wins over the default. In a variable, a `bool` is one of "
        f"{', '.join(true)} or {', '.join(false)}; a tuple is a comma-separated list; an empty default "
        "means what the comment says. See [Configuration](../configuration.md) for how settings are "
        "checked and what each part does.",
    ]
    section = None
    for s in settings:
        if s.section != section:
            section = s.section
            out += ["", f"## {s.section or 'Session'}", "", "| setting | variable | type | default | meaning |"]
            out += ["|---|---|---|---|---|"]
        env = config_module.ENV_PREFIX + s.name.upper()
        default = _env_value(s.default)
        out.append(
            f"| `{s.name}` | `{env}` | `{_type(s.type)}` | {_code(default) if default else '(empty)'} | {_text(s.comment)} |"
        )
    return "\n".join(out) + "\n"


# ---- metrics -------------------------------------------------------------------------------------
GROUP_TITLES = {
    "step": "Steps and phases",
    "collective": "Collectives",
    "throughput": "Throughput",
    "progress": "Progress and hang signals",
    "online": "Online detection (rank 0)",
    "telemetry": "Telemetry's own health",
    "device": "Devices and host",
}


def metrics_page() -> str:
    from telemetry.metrics import names

    out = [
        "# Metrics",
        "",
        GENERATED + f"Every metric a rank exports ({len(names.ALL)} families, `telemetry.metrics.names.ALL`). Every "
        f"series carries the labels {', '.join(f'`{b}`' for b in names.BASE_LABELS)}; the table names the labels "
        "beyond those. The series column is what a query reads (a counter with `_total`, a histogram as "
        "`_bucket`, `_sum`, `_count`); prometheus-client's `_created` series are left out. "
        "[Exporters](../exporters.md) says when a series has a sample and what bounds the label values. "
        "The level column is the least `metrics_level` that exports the metric (`job` < `phase` < `full`, the "
        "default): a rank at a lower level leaves it out ([Scale](../scale.md#a-cardinality-budget-per-rank)).",
    ]
    groups: dict[str, list] = {}
    for m in names.ALL:
        groups.setdefault(m.group, []).append(m)
    for group, metrics in groups.items():
        out += ["", f"## {GROUP_TITLES.get(group, group.capitalize())}", ""]
        out += ["| metric | type | series | labels | level | help |", "|---|---|---|---|---|---|"]
        for m in metrics:
            series = ", ".join(f"`{s}`" for s in m.series)
            labels = ", ".join(f"`{lab}`" for lab in m.labels)
            out.append(f"| `{m.name}` | {m.kind} | {series} | {labels} | {m.level} | {_text(m.help)} |")
    return "\n".join(out) + "\n"


# ---- CLI -----------------------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, once each (aliases left out)."""
    seen = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield name, helps.get(name, ""), sub


def _usage(parser: argparse.ArgumentParser) -> str:
    fmt = argparse.HelpFormatter(parser.prog, width=100)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return fmt.format_help().strip()


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        takes = action.nargs != 0
    else:
        names = action.metavar or action.dest
        takes = False
    value = ""
    if takes:
        if action.choices is not None:
            value = "{" + ",".join(str(c) for c in action.choices) + "}"
        else:
            value = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if isinstance(action, argparse._AppendAction):
        value += " (repeatable)"
    help_text = ""
    if action.help and action.help != argparse.SUPPRESS:
        help_text = argparse.HelpFormatter(parser.prog)._expand_help(action)
    default = action.default
    show_default = takes and default not in (None, argparse.SUPPRESS, [], "") and "default" not in help_text
    if show_default:
        help_text += f" (default {default})"
    return f"| {_code(names)} | {_code(value) if value.strip() else ''} | {_text(help_text)} |"


def _command_body(parser: argparse.ArgumentParser) -> list[str]:
    """A command's usage and the table of its arguments."""
    out = ["```text", _usage(parser), "```"]
    rows = [
        _argument_row(parser, a)
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS
    ]
    if rows:
        out += ["", "| argument | value | what it does |", "|---|---|---|", *rows]
    return out


def _command_section(parser: argparse.ArgumentParser, title: str, summary: str, level: int) -> list[str]:
    out = ["", "#" * level + f" `{title}`", ""]
    if summary:
        out += [html.escape(summary, quote=False), ""]
    if parser.description and " ".join(parser.description.split()) != summary:
        out += [html.escape(" ".join(parser.description.split()), quote=False), ""]
    out += _command_body(parser)
    for name, help_text, sub in _subcommands(parser):
        out += _command_section(sub, f"{title} {name}", help_text, min(level + 1, 4))
    return out


def cli_page() -> str:
    from telemetry.cli import build_parser

    parser = build_parser()
    subcommands = list(_subcommands(parser))
    links = ", ".join(f"[`{name}`](#telemetry-{name})" for name, _, _ in subcommands)
    out = [
        "# Command line",
        "",
        GENERATED + f"The console script `telemetry` (also `python -m telemetry`) and its subcommands {links}. "
        "Every command exits with one of the [exit codes](exit-codes.md).",
        "",
        *_command_body(parser),
    ]
    for name, help_text, sub in subcommands:
        out += _command_section(sub, f"telemetry {name}", help_text, 2)
    return "\n".join(out) + "\n"


PAGES = {
    "reference/exit-codes.md": exit_codes_page,
    "reference/settings.md": settings_page,
    "reference/metrics.md": metrics_page,
    "reference/cli.md": cli_page,
}


# ---- the MkDocs hook -----------------------------------------------------------------------------
def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, page in PAGES.items():
        if files.get_file_from_path(path) is not None:
            log.warning("docs/%s exists but is generated at build time: remove it", path)
            files.remove(files.get_file_from_path(path))
        files.append(File.generated(config, path, content=page()))
    return files


if __name__ == "__main__":
    wanted = sys.argv[1:] or [p.split("/")[-1][:-3] for p in PAGES]
    for path, page in PAGES.items():
        if path.split("/")[-1][:-3] in wanted:
            sys.stdout.write(page())
