"""The command line's help and its usage errors, as a newcomer meets them: one default per option, help on every
option of every verb, a mistyped verb suggested rather than read as a file, a bad option pointing to the verb's own
help, and the demo's duration said the same way in README and in `memtui demo --help`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from memtui.cli.main import build_parser, main

README = Path(__file__).parents[2] / "README.md"

# Arguments without help that live in modules other sessions are editing (cli/plan.py, info.py, estimate.py,
# export.py, extract.py, status.py). Each is a one-line fix in its module; remove the entry with it.
ELSEWHERE: set[tuple[str, str]] = set()  # options of other verbs still without help (none left)


def verb_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every verb's parser by its words (``sample synthetic`` too: a verb's own sub-commands are walked)."""
    found = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:  # noqa: SLF001 - argparse has no public accessor
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, sub in action.choices.items():
                    found[f"{prefix} {name}".strip()] = sub
                    walk(f"{prefix} {name}", sub)

    walk("", build_parser())
    return found


@pytest.fixture
def memtui(capsys):
    """`memtui ARGS` in-process, help and usage errors included (argparse ends them with SystemExit); returns
    (exit status, stdout, stderr)."""

    def run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as end:
            code = end.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def rendered_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An argument's help as `--help` prints it, on one line."""
    return " ".join(parser._get_formatter()._expand_help(action).split())  # noqa: SLF001 - the formatter's own text


def arguments(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]  # noqa: SLF001


def test_every_option_shows_its_default_once_the_same_way():
    seen = 0
    for verb, parser in verb_parsers().items():
        for action in arguments(parser):
            if not action.help:
                continue
            text = rendered_help(parser, action)
            where = f"memtui {verb} {action.option_strings or action.dest}: {text}"
            assert text.count("default:") <= 1 and "(default" not in text, where
            assert not re.search(r"\[(?!default: )[^\[\]]*\]$", text), where  # a bare "[1000]" reads as anything
            shown = action.default not in (None, "", [], argparse.SUPPRESS) and not isinstance(action.default, bool)
            if action.option_strings and shown:
                assert "[default: " in text, where
                seen += 1
    assert seen > 40


def test_the_repeated_defaults_reported_are_said_once(memtui):
    code, out, _ = memtui("fetch", "--help")
    assert code == 0 and " ".join(out.split()).count("[default: 4]") == 1 and "(default: 4)" not in out
    code, out, _ = memtui("extract", "--help")
    flat = " ".join(out.split())
    assert "or all [default: all pending]" in flat and "[default: all]" not in flat


def test_every_option_of_every_verb_has_help():
    missing = set()
    for verb, parser in verb_parsers().items():
        for action in arguments(parser):
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - its choices carry the help
                missing |= {(verb, c.dest) for c in action._choices_actions if not c.help}  # noqa: SLF001
            elif not (action.help or "").strip():
                missing.add((verb, action.option_strings[-1] if action.option_strings else action.dest))
    assert missing <= ELSEWHERE, sorted(missing - ELSEWHERE)
    assert not {("build", o) for o in ("--treatment-column", "--tokens-column", "--seq-len", "--seed")} & missing


@pytest.mark.parametrize(
    ("typed", "verb"), [("estimat", "estimate"), ("exprt", "export"), ("stauts", "status"), ("est", "estimate")]
)
def test_a_mistyped_verb_is_suggested_not_read_as_a_file(memtui, typed, verb, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = memtui(typed, "P.h5")
    assert code == 2 and out == ""
    assert err == f"memtui: {typed}: no such command or file; did you mean `memtui {verb}`?\n"


def test_a_file_or_a_path_is_never_taken_for_a_mistyped_verb(memtui, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "estimat").write_bytes(b"not a panel")  # an existing file of that name is opened as a panel
    code, _, err = memtui("estimat")
    assert code == 2 and "did you mean" not in err and "estimat" in err
    for path in ("plan.h5", "sub/estimat"):  # a path: the panel file to make is suggested
        code, _, err = memtui(path)
        assert code == 2 and "did you mean" not in err and "no such file; make one with" in err
    code, _, err = memtui("nothing-like-a-verb")  # a word: a command is more likely meant than a file to make
    assert err == "memtui: nothing-like-a-verb: no such command or file; `memtui --help` lists the commands.\n"
    assert code == 2


def test_a_bad_option_points_to_the_verbs_own_help(memtui, small_panel):
    code, _, err = memtui("estimate", small_panel, "--bogus")
    assert code == 2 and err == "memtui: unrecognized arguments: --bogus (see `memtui estimate --help`)\n"
    for verb in verb_parsers():
        code, _, err = memtui(*verb.split(), "--bogus")
        assert code == 2 and err.endswith(f"(see `memtui {verb} --help`)\n") and len(err.splitlines()) == 1, err
    code, _, err = memtui(small_panel, "--bogus")  # `memtui PANEL` is `memtui app PANEL`
    assert err.endswith("(see `memtui app --help`)\n")
    code, _, err = memtui("--bogus")
    assert code == 2 and err.endswith("(see `memtui --help`)\n")


def test_readme_and_demo_help_give_the_same_measured_duration(memtui):
    from memtui.cli.demo import FULL_DEMO_TIME

    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("memtui demo  "))
    readme = " ".join(line.split("#", 1)[1] for line in lines[start : start + 2] if "#" in line)
    code, out, _ = memtui("demo", "--help")
    assert code == 0
    assert FULL_DEMO_TIME in " ".join(readme.split()) and FULL_DEMO_TIME in " ".join(out.split())
    figures = re.findall(r"(\d+(?:-\d+)?) min", readme)
    assert figures == re.findall(r"(\d+(?:-\d+)?) min", FULL_DEMO_TIME) == ["2", "20-30"]
