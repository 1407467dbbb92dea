"""Every option a verb accepts, it honours or refuses in one line: every verb (``memtui.cli.VERBS``) x every shared
option (the groups of ``memtui.cli.options``), each given a value other than the verb's default. The verb must refuse
it (exit 2, one line ``memtui: ...``, nothing written), or what it prints and the files it writes must differ from
the run without it, or the pair must be in ``SILENT``: accepted and honoured in a way the output does not show."""

from __future__ import annotations

import re

import numpy as np
import pytest

from memtui.cli import VERBS
from memtui.cli.main import build_parser, main
from memtui.panel.synthetic import Simulation, write_synthetic

# Each shared option (its long flag) with values to give it, the first that is not the verb's default being used. The
# panels have a covariate `grp` (clusters inside cohorts, as the calibrated band needs), `half` (two groups of every
# cohort) and `x` (continuous). `--sample` replaces the verb's panels (see _argv).
SHARED = {
    "--metric": ["accuracy"],
    "--estimator": ["difference"],
    "--base-period": ["universal", "varying"],
    "--control-group": ["not_yet_treated"],
    "--draws": ["30"],
    "--multiplier": ["mammen"],
    "--seed": ["7"],
    "--alpha": ["0.1"],
    "--family": ["all"],
    "--final-step": ["3000"],
    "--engine": ["differences"],
    "--band": ["classic", "calibrated"],
    "--cluster": ["grp"],
    "--no-cache": [],
    "--covariates": ["x"],
    "--by": ["half"],
    "--shared-controls": [],
    "--sample": ["synthetic"],
}

# How each verb that takes a shared option is run: its arguments besides the option ({P}: a panel, {Q}: a second
# model's panel over the same instances, {OUT}: the file it writes). `compare` has two cases: a suite of models, and
# one panel's three estimators. Small panels and few draws keep it fast (sensitivity: the smoothness method at one M
# and two event times, as its breakdown search over every event time takes seconds).
CASES = {
    "estimate": ["estimate", "{P}", "--draws", "40"],
    "export": ["export", "{P}", "-o", "{OUT}", "--all", "--draws", "40"],
    "compare": ["compare", "{P}", "{Q}", "--draws", "40", "-o", "{OUT}"],
    "compare one panel": ["compare", "{P}", "--draws", "40", "-o", "{OUT}"],
    "plan": ["plan", "{P}", "--draws", "40"],
    "calibrate": ["calibrate", "{P}", "--panels", "3", "--draws", "20"],
    "sensitivity": [
        "sensitivity",
        "{P}",
        "--draws",
        "40",
        "--method",
        "sd",
        "--grid",
        "1",
        "--pre",
        "1",
        "--post",
        "1",
    ],  # fmt: skip
    "info": ["info", "{P}"],
    "provenance": ["provenance", "{P}", "--permutations", "99"],
    "instances": ["instances", "{P}", "-o", "{OUT}"],
}

# Verbs not run here (they open a terminal or a server, need a model, a corpus or the network, or write a new panel):
# a shared option's flag they accept is then their own option of that name, each listed in OWN with what it is.
NOT_RUN = {
    "app": "opens the workbench in this terminal",
    "serve": "starts a web server",
    "sample": "writes a new panel (its options are its simulation's)",
    "build": "needs a training corpus",
    "extract": "needs a language model",
    "fetch": "needs the network",
    "demo": "trains a model",
}
OWN = {
    ("app", "--sample"): "opens a shipped sample (tests/cli/test_cli.py)",
    ("serve", "--sample"): "serves a shipped sample (tests/cli/test_serve.py)",
    ("sample", "--seed"): "the simulation's seed",
    ("build", "--seed"): "the seed of the sampled batches and rows",
}

# Accepted and honoured in a way the output does not show. Keep it tiny; each entry says why.
SILENT = {
    # recomputing instead of reading the cache gives the very same numbers (the cache's keys: tests/estimation)
    ("estimate", "--no-cache"): "the same numbers, recomputed",
    ("export", "--no-cache"): "the same numbers, recomputed",
    ("calibrate", "--no-cache"): "the same seeded simulation, rerun",
    # these cache nothing: they recompute every time, which is all --no-cache asks (scripts pass it to every verb)
    ("compare", "--no-cache"): "recomputed, as always",
    ("sensitivity", "--no-cache"): "recomputed, as always",
}

SIM = Simulation(n_cohorts=4, per_cohort=12, n_never=30, n_checkpoints=6, seed=5)


@pytest.fixture(scope="module")
def panels(tmp_path_factory):
    """Two models' panels over the same instances, with the covariates SHARED names."""
    from memtui.panel.covariates import write_covariates
    from memtui.panel.hdf5 import read_panel

    root = tmp_path_factory.mktemp("verb-options")
    made = []
    for name, seed in (("a", 5), ("b", 6)):
        path = write_synthetic(root / f"{name}.h5", Simulation(**{**SIM.__dict__, "seed": seed}))
        treatment = read_panel(path).treatment
        i = np.arange(len(treatment))
        grp = np.array([f"{g}-{k % 2}" for g, k in zip(treatment, i, strict=True)])
        half = np.where(i % 2 == 0, "even", "odd")
        write_covariates(path, {"grp": grp, "half": half, "x": np.random.default_rng(seed).normal(size=len(i))})
        made.append(path)
    return made


def _parser(verb: str):
    return next(a for a in build_parser()._actions if a.dest == "command").choices[verb]  # noqa: SLF001


def _given(verb: str, option: str) -> list[str]:
    """The option with its first value that is not the verb's default."""
    action = _parser(verb)._option_string_actions.get(option)  # noqa: SLF001
    values = SHARED[option]
    if not values:
        return [option]
    default = None if action is None else action.default
    return [option, next(v for v in values if str(default) != v)]


def _argv(case: str, option: str | None, panels, tmp_path) -> list[str]:
    values = {"{P}": str(panels[0]), "{Q}": str(panels[1]), "{OUT}": str(tmp_path / "out.csv")}
    argv = [values.get(a, a) for a in CASES[case]]
    if option == "--sample":  # the sample instead of the panels
        argv = [a for a in argv if a not in (values["{P}"], values["{Q}"])]
    return argv + (_given(argv[0], option) if option else [])


def _seen(argv: list[str], tmp_path, capsys) -> tuple[int, str, str]:
    """Exit status, what the run printed (timings left out) followed by the files it wrote, and stderr."""
    for f in tmp_path.glob("out*.csv"):
        f.unlink()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    out = capsys.readouterr()
    text = re.sub(r" in \d+ s\b", "", out.out)
    for f in sorted(tmp_path.glob("out*.csv")):
        text += f"\n--- {f.name}\n{f.read_text()}"
    return code, text, out.err


def _refused(code: int, text: str, err: str) -> bool:
    return code == 2 and err.startswith("memtui: ") and err.count("\n") == 1 and not text


def test_every_verb_is_walked():
    assert {case.split()[0] for case in CASES} | set(NOT_RUN) | {"import", "status", "covariates"} == set(VERBS)


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_shared_option_a_verb_does_not_take_is_refused_in_one_line(verb, capsys, tmp_path):
    """Verbs are given each shared option they do not accept (argparse refuses it before anything runs); one they
    accept must be walked by CASES, or be the verb's own option of that name (OWN)."""
    for option in SHARED:
        if option in _parser(verb)._option_string_actions:  # noqa: SLF001
            assert verb in CASES or (verb, option) in OWN, f"{verb} takes {option}: walk it in CASES"
            continue
        code, text, err = _seen([verb, *_given(verb, option)], tmp_path, capsys)
        assert _refused(code, text, err), (verb, option, err)


@pytest.mark.parametrize("case", list(CASES))
def test_each_shared_option_is_honoured_or_refused(case, panels, tmp_path, capsys):
    verb = CASES[case][0]
    code, base, err = _seen(_argv(case, None, panels, tmp_path), tmp_path, capsys)
    assert code == 0, (case, err)
    ignored = []
    for option in SHARED:
        if option not in _parser(verb)._option_string_actions:  # noqa: SLF001 - the test above
            continue
        code, seen, err = _seen(_argv(case, option, panels, tmp_path), tmp_path, capsys)
        if _refused(code, seen, err):
            assert (verb, option) not in SILENT, f"{verb} refuses {option}: drop it from SILENT"
            continue
        assert code == 0, (case, option, err)  # anything else: a refusal is one line `memtui: ...`, exit 2
        if seen == base and (verb, option) not in SILENT:
            ignored.append(option)
        elif seen != base:
            assert (verb, option) not in SILENT, f"{verb} shows {option}: drop it from SILENT"
    assert not ignored, f"{case} accepts and ignores {ignored}"


@pytest.mark.parametrize("case", list(CASES))
def test_a_panel_and_a_sample_together_are_refused(case, panels, tmp_path, capsys):
    code, seen, err = _seen(_argv(case, None, panels, tmp_path) + ["--sample", "synthetic"], tmp_path, capsys)
    assert _refused(code, seen, err) and "not both" in err, err
