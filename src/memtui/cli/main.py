"""The ``memtui`` command line: the parser built from every verb's module, and the one place that maps errors to exit
statuses (MemtuiError -> 2, KeyboardInterrupt -> 130, a closed pipe -> 0)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from memtui import __version__
from memtui.cli import VERBS
from memtui.core.errors import MemtuiError
from memtui.core.text import clean


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's default in its help (``[default: 2049]``) unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default is None
            or isinstance(default, bool)
            or default in (argparse.SUPPRESS, "", [])
            or "[" in text
            or "%(default)" in text
        ):
            return text
        return f"{text} [default: %(default)s]"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``memtui: ...``, exit 2) like every other error, not the usage text;
    and every option's help shows its default."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"memtui: {clean(message)} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole parser: a subparser per verb of ``VERBS``, each filled by its module's ``add_arguments``."""
    parser = OneLineParser(
        prog="memtui",
        description="Causal estimation of memorisation profiles. `memtui [PANEL]` opens the workbench.",
    )
    parser.add_argument("--version", action="version", version=f"memtui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for verb, name in VERBS.items():
        module = importlib.import_module(f"memtui.cli.{name}")
        p = sub.add_parser(verb, help=module.SUMMARY, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


# options whose value is itself sbatch options ("--qos=high"): argparse would take such a value for an option
_RAW_VALUE_OPTIONS = ("--slurm-extra",)


def _bind_option_values(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in _RAW_VALUE_OPTIONS and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    argv = _bind_option_values(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public accessor
    # `memtui` and `memtui PANEL` open the app; everything else is a subcommand.
    if not argv or (argv[0] not in known and not argv[0].startswith("-")) or argv[0].startswith("--sample"):
        argv = ["app", *argv]
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MemtuiError as exc:
        print(f"memtui: {clean(exc, limit=None)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memtui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
