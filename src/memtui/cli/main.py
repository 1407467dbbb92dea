"""The ``memtui`` command line: the parser built from every verb's module, and the one place that maps errors to exit
statuses (MemtuiError -> 2, KeyboardInterrupt -> 130, a closed pipe -> 0)."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from pathlib import Path

from memtui import __version__
from memtui.cli import VERBS
from memtui.core.errors import MemtuiError
from memtui.core.text import clean

# A default a help text states itself: "(default: all pending)", "[default: all]" or a closing "[1000]".
_STATED_DEFAULT = (
    re.compile(r"\s*\(default:?\s+(?P<default>[^()]*)\)"),
    re.compile(r"\s*\[default:\s*(?P<default>[^\[\]]*)\]"),
    re.compile(r"\s*\[(?P<default>[^\[\]]*)\]\s*$"),
)


def stated_default(text: str) -> tuple[str, str | None]:
    """``text`` without the default it states, and that default (None when it states none)."""
    for pattern in _STATED_DEFAULT:
        found = pattern.search(text)
        if found:
            return (text[: found.start()] + text[found.end() :]).strip(), found["default"].strip()
    return text, None


class DefaultsFormatter(argparse.HelpFormatter):
    """Every default shown once, the same way, at the end of its help: ``[default: 2049]``. A help text that words its
    default itself ("(default: all pending)", "[the pilot's]") has that wording moved there; otherwise the option's
    value is shown. Flags (store_true) and options without a default show none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text, default = stated_default(action.help or "")
        if default is None and action.option_strings and _shows_default(action.default):
            default = "%(default)s"
        return f"{text} [default: {default}]" if default else text


def _shows_default(value) -> bool:
    return value is not None and not isinstance(value, bool) and value not in (argparse.SUPPRESS, "", [])


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``memtui: ...``, exit 2) like every other error, not the usage text;
    and every option's help shows its default."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        # no abbreviations: `memtui demo --seed 7` would be `--seeds` (another demo, written to ./7) and an option a
        # verb does not have would be taken for one it has; every option is spelled out or refused
        kwargs.setdefault("allow_abbrev", False)
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


def looks_like_verb(word: str) -> bool:
    """Whether ``word`` reads as a command rather than a panel file: letters only (a path has a dot or a slash) and
    no file of that name."""
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z_-]*", word)) and not Path(word).exists()


def suggested_verb(word: str, verbs) -> str | None:
    """The verb ``word`` is probably a typo or a start of (``estimat``, ``est`` -> ``estimate``); None when it names an
    existing file, looks like a path (a dot or a slash: verbs have neither) or is close to no verb."""
    if not looks_like_verb(word):
        return None
    starting = [verb for verb in verbs if verb.startswith(word.lower())]
    if len(starting) == 1:  # `memtui est`
        return starting[0]
    close = difflib.get_close_matches(word.lower(), sorted(verbs), n=1, cutoff=0.6)
    return close[0] if close else None


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an option no parser knows is refused by the verb's own parser, whose message points to that
    verb's help (`memtui estimate --help`), not to `memtui --help`."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub-)command ``args`` ran: ``memtui sample synthetic``'s, not ``memtui``'s."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if chosen not in (subs[0].choices if subs else {}):
            return parser
        parser = subs[0].choices[chosen]


def main(argv: list[str] | None = None) -> int:
    argv = _bind_option_values(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001 - argparse has no public accessor
    # `memtui` and `memtui PANEL` open the app; everything else is a subcommand.
    if not argv or (argv[0] not in known and not argv[0].startswith("-")) or argv[0].startswith("--sample"):
        if argv and looks_like_verb(argv[0]):  # `memtui nosuchverb`: a mistyped command, not a panel to make
            verb = suggested_verb(argv[0], known)
            hint = f"did you mean `memtui {verb}`?" if verb else "`memtui --help` lists the commands."
            print(f"memtui: {clean(argv[0])}: no such command or file; {hint}", file=sys.stderr)
            return 2
        argv = ["app", *argv]
    args = parse(parser, argv)
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
