"""MkDocs hooks: the pages and files the site takes from the code and the repository at build time.

- ``reference/cli.md`` is written from ``fastppo.cli.main.build_parser()``: every subcommand, its
  usage and every flag with its help, so a flag added in code appears without editing the docs.
- ``benchmarks/*.png`` are served from the repository's ``benchmarks/`` folder, where the benchmark
  scripts write them, so the pages show the committed images without a copy to keep in step.
- ``javascripts/mathjax/`` is MathJax 3 copied from the installed ``django-static-mathjax`` package
  (the ``[docs]`` extra; it ships MathJax's files and needs no Django), so the equations are typeset
  by the site's own copy, with no network when the pages are read.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI_PAGE = "reference/cli.md"
MATHJAX_DIR = "javascripts/mathjax"
MATHJAX_FILES = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2/*", "input/tex/extensions/*")
"""The component the pages load, the fonts it draws with and the TeX packages it loads on demand."""


def cell(text: str) -> str:
    """Plain help text as one Markdown table cell: no HTML, no pipes, no emphasis."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def flag_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    flags = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0:
        flags += f" `{action.metavar or action.dest.upper()}`"
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    return f"| {flags} | {cell(text)} |"


def subcommand_section(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    lines = [
        f"## fastppo {name}",
        "",
        cell(summary or "") if summary else "",
        "",
        parser.description or "",
        "",
        "```text",
        usage,
        "```",
        "",
    ]
    for group in parser._action_groups:
        actions = [
            a for a in group._group_actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
        ]
        if not actions:
            continue
        title = {"positional arguments": "Arguments", "options": "Options"}.get(group.title, group.title)
        lines += [f"**{cell(title)}**", "", "| flag | meaning |", "|---|---|"]
        lines += [flag_row(parser, action) for action in actions]
        lines.append("")
    return lines


def cli_reference() -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from fastppo.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in subparsers._choices_actions}
    lines = [
        "# CLI reference",
        "",
        "Written from the command's own parsers when the site is built (`docs/hooks.py`), so it",
        "lists every subcommand and flag of this version; `fastppo COMMAND --help` prints the same.",
        "A boolean flag also takes `--no-FLAG` for false. Bad input to any of them is one line on",
        "stderr and exit code 2.",
        "",
    ]
    for name, sub in subparsers.choices.items():
        lines += subcommand_section(name, sub, summaries.get(name, ""))
    return "\n".join(lines) + "\n"


def mathjax_files() -> dict[str, Path]:
    """Site path -> installed file, for MathJax's files the site serves (and its licence)."""
    from mkdocs.exceptions import PluginError

    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError("MathJax is not installed: pip install -e '.[docs]' (it brings django-static-mathjax)")
    package = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    es5 = package / "es5"
    found = {
        f"{MATHJAX_DIR}/{path.relative_to(es5)}": path
        for pattern in MATHJAX_FILES
        for path in sorted(es5.glob(pattern))
    }
    if f"{MATHJAX_DIR}/tex-mml-chtml.js" not in found:
        raise PluginError(f"no MathJax 3 component tex-mml-chtml.js in {es5}: pip install -e '.[docs]'")
    return found | {f"{MATHJAX_DIR}/LICENSE": package / "LICENSE"}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File  # here, so that tests can read cli_reference() without mkdocs

    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    for image in sorted((ROOT / "benchmarks").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{image.name}", abs_src_path=str(image)))
    for site_path, path in mathjax_files().items():
        files.append(File.generated(config, site_path, abs_src_path=str(path)))
    return files
