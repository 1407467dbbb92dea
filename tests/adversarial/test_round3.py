"""Issue 17, round 3: statistics, import and the CLI that reads them.

Each test is a case a user hit (a FIFO among the checkpoint files, a damaged reference file, an alpha no band can
have, a cache that forgot the metric's sign, a plan of 10^16 instances, ...) made into the class it belongs to: only
regular files are opened; every number a file or an option gives is checked before it is used; a cache entry is keyed
on everything its result depends on; one definition of persistent memorisation; the CLI's words and numbers say what
they mean.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, simulate

from .conftest import assert_refused

SIM = Simulation(n_cohorts=4, per_cohort=12, n_never=40, n_checkpoints=6, seed=11)
FAST = ("-B", "100", "--no-cache")
ROOT = Path(__file__).resolve().parents[2]


def sim_panel(path, sim: Simulation = SIM, *, attrs=None, metrics=("loglik", "accuracy")) -> Path:
    d = simulate(sim)
    return create_panel(
        path,
        ids=d["ids"],
        treatment=d["treatment"],
        steps=d["steps"],
        values={m: d["values"][m] for m in metrics},
        signs={m: d["signs"][m] for m in metrics},
        attrs=attrs,
    )


# -- 1. only regular files are opened -----------------------------------------------------------------------------


def _lists(rows: list[np.ndarray], value_type) -> pa.Array:
    return pa.array([r.tolist() for r in rows], pa.list_(value_type))


def write_token_file(path: Path, seq_idx, lengths, seed: int = 0) -> None:
    """One checkpoint's per-token file in the authors' schema: per row, lists of ``lengths[i]`` targets."""
    rng = np.random.default_rng(seed)
    sup = [rng.gamma(2.0, 1.0, n) for n in lengths]
    rank = [rng.poisson(3.0, n) for n in lengths]
    ent = [rng.gamma(2.0, 1.0, n) for n in lengths]
    table = pa.table(
        {
            "seq_idx": pa.array(np.asarray(seq_idx), pa.int64()),
            "sup": _lists(sup, pa.float32()),
            "rank": _lists(rank, pa.int32()),
            "entropy": _lists(ent, pa.float32()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


# two cohorts (first trained at steps 1000 and 2000: training rows 0.. and 1024000..) and validation rows (negative)
SEQ = np.r_[np.arange(6), 1_024_000 + np.arange(6), -np.arange(1, 9)]


def token_folder(folder: Path, steps=(0, 1000, 2000), length: int = 80, change=None) -> Path:
    for i, step in enumerate(steps):
        lengths = np.full(len(SEQ), length)
        if change is not None and i == len(steps) - 1:
            lengths = change(lengths)
        write_token_file(folder / f"step{step}" / f"data-step{step}.parquet", SEQ, lengths, seed=i)
    return folder


def test_a_fifo_among_the_checkpoint_files_is_refused_not_opened(tmp_path, memtui):
    folder = token_folder(tmp_path / "tokens")
    os.mkfifo(folder / "step3000.parquet")  # opening it for reading would wait forever for a writer
    result = memtui("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5", timeout=60)
    assert_refused(result, "not a regular file")
    assert "step3000.parquet" in result.err
    assert not (tmp_path / "p.h5").exists()


@pytest.mark.parametrize("kind", ["link to a fifo", "folder", "dangling link"])
def test_no_other_kind_of_file_is_opened_as_a_checkpoint(tmp_path, memtui, kind):
    folder = token_folder(tmp_path / "tokens")
    odd = folder / "step3000.parquet"
    if kind == "link to a fifo":
        os.mkfifo(tmp_path / "fifo")
        odd.symlink_to(tmp_path / "fifo")
    elif kind == "folder":
        odd.mkdir()
    else:
        odd.symlink_to(tmp_path / "nowhere")
    result = memtui("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5", timeout=60)
    assert_refused(result, "not a regular file")


def test_the_token_folder_still_imports_when_every_file_is_regular(tmp_path, cli):
    folder = token_folder(tmp_path / "tokens")
    (folder / "step3000.parquet").symlink_to(folder / "step2000" / "data-step2000.parquet")  # a link to a file is fine
    code, out, err = cli("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5")
    assert code == 0, err
    assert read_panel(tmp_path / "p.h5").steps.tolist() == [0, 1000, 2000, 3000]


def test_a_fifo_at_a_cache_entry_is_a_miss_not_a_hang(tmp_path, memtui):
    from memtui.estimation import cache

    path = sim_panel(tmp_path / "p.h5")
    settings = Settings(metric="loglik", draws=100)
    panel = read_panel(path)
    folder = cache.cache_dir(panel)
    folder.mkdir(parents=True)
    os.mkfifo(folder / (cache.cache_key(panel, settings) + ".json"))
    result = memtui("estimate", path, "-B", "100", "-m", "loglik", timeout=120)
    assert result.code == 0 and "instantaneous" in result.out, result.err


# -- 4. lists that change length across checkpoints ----------------------------------------------------------------


def test_an_instance_whose_lists_change_length_across_checkpoints_is_refused(tmp_path, cli):
    def shorter(lengths):
        lengths = lengths.copy()
        lengths[2] -= 1  # one instance scored on one token fewer at the last checkpoint
        return lengths

    folder = token_folder(tmp_path / "tokens", change=shorter)
    err = assert_refused(cli("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5"), "length")
    assert "1 instance" in err and "seq_idx 2" in err, err
    assert not (tmp_path / "p.h5").exists()


def test_a_missing_list_is_a_missing_value_not_another_length(tmp_path, cli):
    folder = token_folder(tmp_path / "tokens")
    path = folder / "step2000" / "data-step2000.parquet"
    table = pq.read_table(path)
    cols = {}
    for name in ("sup", "rank", "entropy"):
        values = table[name].to_pylist()
        values[3] = None  # row 3 not scored at this checkpoint
        cols[name] = pa.array(values, table.schema.field(name).type)
    pq.write_table(table.drop(["sup", "rank", "entropy"]).append_column("sup", cols["sup"])
                   .append_column("rank", cols["rank"]).append_column("entropy", cols["entropy"]), path)  # fmt: skip
    code, out, err = cli("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5")
    assert code == 0, err
    loglik = read_panel(tmp_path / "p.h5").metrics["loglik"]
    assert np.isnan(loglik[list(np.sort(SEQ)).index(3), -1])


# -- 7c. --max-step before the first cohort ------------------------------------------------------------------------


def test_max_step_before_the_first_cohort_says_so(tmp_path, cli):
    folder = token_folder(tmp_path / "tokens")
    err = assert_refused(
        cli("import", "--preset", "pythia-tokens", folder, tmp_path / "p.h5", "--max-step", "500"), "--max-step 500"
    )
    assert "1000" in err and "treatment" not in err, err


# -- 2. numbers from a reference file and options are checked before use ----------------------------------------------


@pytest.fixture
def reference(tmp_path):
    """A panel and the paper-format estimates file that memtui's own estimate of it makes (they agree)."""
    panel = sim_panel(tmp_path / "p.h5")
    res = estimate(read_panel(panel), Settings(metric="accuracy", draws=100))
    c = res.cells
    steps = SIM.steps.tolist()
    before = {s: steps[i - 1] if i else -1 for i, s in enumerate(steps)}
    cohort, time = c["cohort"].to_numpy(), c["checkpoint"].to_numpy()
    base = np.where(time < cohort, [before[t] for t in time], [before[g] for g in cohort])
    frame = pl.DataFrame(
        {
            "cohort": cohort.astype(float),
            "base_period": base.astype(float),
            "time": time.astype(float),
            "ATT": c["estimate"].to_numpy(),
            "std_error": c["std_error"].to_numpy(),
            "lower": c["band_low"].to_numpy(),
            "upper": c["band_high"].to_numpy(),
            "zero_not_in_cband": np.where(c["significant"].to_numpy(), "*", ""),
            "model_size": "70m",
            "stat": "token_accuracy",
        }
    )
    return panel, frame


def _write(frame: pl.DataFrame, path: Path) -> Path:
    frame.write_parquet(path)
    return path


def test_the_reference_fixture_agrees(reference, tmp_path, cli):
    panel, frame = reference
    code, out, err = cli(
        "compare", panel, "-B", "100", "-m", "accuracy", "--reference", _write(frame, tmp_path / "r.pq")
    )
    assert code == 0, err
    assert "verdict: memtui agrees" in out


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("cohort", float("nan"), "cohort"),
        ("time", 1e30, "time"),
        ("cohort", 2000.5, "whole"),  # a fractional cohort was truncated to 2000 and matched
        ("base_period", float("inf"), "base_period"),
    ],
)
def test_reference_steps_that_are_not_whole_numbers_are_refused(reference, tmp_path, cli, column, value, words):
    panel, frame = reference
    values = frame[column].to_numpy().copy()
    values[np.flatnonzero(frame["cohort"].to_numpy() == 2000)[0]] = value
    path = _write(frame.with_columns(pl.Series(column, values)), tmp_path / "r.pq")
    assert_refused(cli("compare", panel, *FAST, "-m", "accuracy", "--reference", path), words)


@pytest.mark.parametrize("missing", [None, float("nan")])
def test_a_reference_cell_without_an_estimate_never_agrees(reference, tmp_path, cli, missing):
    panel, frame = reference
    att = frame["ATT"].to_list()
    att[0] = missing
    path = _write(frame.with_columns(pl.Series("ATT", att, dtype=pl.Float64)), tmp_path / "r.pq")
    code, out, err = cli("compare", panel, "-B", "100", "-m", "accuracy", "--reference", path)
    assert code == 0, err
    assert "memtui agrees" not in out
    assert "1 cell has no estimate in the reference" in out, out
    assert "verdict: memtui disagrees" in out


def test_a_float_significance_column_with_nan_is_not_significant(reference, tmp_path):
    from memtui.report.reference import compare_reference

    panel, frame = reference
    flags = np.where(frame["zero_not_in_cband"].to_numpy() == "*", 1.0, np.nan)  # NaN where not significant
    path = _write(frame.with_columns(pl.Series("zero_not_in_cband", flags)), tmp_path / "r.pq")
    comp = compare_reference(read_panel(panel), path, Settings(metric="accuracy", draws=100))
    cells = comp.cells
    assert (cells["reference_significant"] == cells["memtui_significant"]).all()
    assert comp.agrees


def test_a_significance_column_that_says_something_else_is_refused(reference, tmp_path, cli):
    panel, frame = reference
    path = _write(frame.with_columns(pl.lit(0.5).alias("zero_not_in_cband")), tmp_path / "r.pq")
    assert_refused(cli("compare", panel, *FAST, "-m", "accuracy", "--reference", path), "zero_not_in_cband")


@pytest.mark.parametrize("alpha", ["1e-16", "0", "0.9", "nan"])
@pytest.mark.parametrize("verb", ["estimate", "export", "compare", "plan"])
def test_an_alpha_no_band_can_have_is_refused(tmp_path, cli, verb, alpha):
    panel = sim_panel(tmp_path / "p.h5")
    extra = ("-o", tmp_path / "x.csv") if verb == "export" else ()
    cache = ("--no-cache",) if verb != "plan" else ()
    err = assert_refused(cli(verb, panel, *extra, "-B", "100", *cache, "--alpha", alpha), "alpha")
    assert "0.0001" in err and "0.5" in err, err


def test_the_alpha_bounds_are_in_the_help(cli, capsys):
    for verb in ("estimate", "export", "compare", "plan"):
        with pytest.raises(SystemExit):
            cli(verb, "--help")
        text = " ".join(capsys.readouterr().out.split())
        assert "0.0001" in text and "0.5" in text, verb


def test_the_smallest_alpha_is_an_answer(tmp_path, cli):
    code, out, err = cli("estimate", sim_panel(tmp_path / "p.h5"), *FAST, "--alpha", "0.0001")
    assert code == 0, err
    assert "simultaneous 100% band" not in out and "99.99% band" in out, out


@pytest.mark.parametrize("effect", ["1e-300", "1e-200", "5e-324"])
def test_an_effect_too_small_for_any_panel_is_refused(tmp_path, cli, effect):
    err = assert_refused(cli("plan", sim_panel(tmp_path / "p.h5"), "-B", "100", "--effect", effect), "--effect")
    assert "too small" in err, err


# -- 3. the cache key covers everything the estimate depends on ----------------------------------------------------


def long_table(path: Path) -> Path:
    d = simulate(SIM)
    y = d["values"]["loglik"]
    n, t = y.shape
    pl.DataFrame(
        {
            "unit": np.repeat(d["ids"], t),
            "step": np.tile(d["steps"], n),
            "g": np.repeat(d["treatment"], t),
            "score": y.reshape(-1),
        }
    ).write_csv(path)
    return path


def _mean_instantaneous(out: str) -> float:
    return float(re.search(r"instantaneous\s+mean (\S+)", out).group(1))


def test_reimporting_with_another_sign_is_never_read_from_the_cache(tmp_path, cli):
    table, panel = long_table(tmp_path / "t.csv"), tmp_path / "p.h5"
    base = ("import", table, panel, "--unit", "unit", "--time", "step", "--treatment", "g")
    assert cli(*base)[0] == 0
    code, out, err = cli("estimate", panel, "-B", "100")
    assert code == 0, err
    before = _mean_instantaneous(out)
    assert before > 0
    assert cli(*base, "--lower-is-better", "score", "--force")[0] == 0
    code, out, err = cli("estimate", panel, "-B", "100")  # the same values, the same settings, the other sign
    assert code == 0, err
    assert _mean_instantaneous(out) == pytest.approx(-before)
    # plan reads the same cache: with the sign flipped the pilot shows no memorisation to plan for
    assert_refused(cli("plan", panel, "-B", "100"), "no instantaneous memorisation")


def test_the_cache_key_changes_with_each_thing_the_result_depends_on(tmp_path):
    from memtui.estimation import cache

    panel = read_panel(sim_panel(tmp_path / "p.h5"))
    settings = Settings(metric="loglik", draws=100)
    key = cache.cache_key(panel, settings)
    assert cache.cache_key(panel, settings) == key
    flipped = replace(panel, signs={**panel.signs, "loglik": -panel.signs["loglik"]})
    moved = replace(panel, treatment=np.where(panel.treatment == 2000, 3000, panel.treatment))
    assert cache.cache_key(flipped, settings) != key
    assert cache.cache_key(moved, settings) != key
    assert cache.cache_key(panel, replace(settings, alpha=0.1)) != key


def test_an_entry_of_the_other_sign_is_a_miss(tmp_path):
    """Even an entry stored under this key is not used when it records another sign (an entry of an older key)."""
    from memtui.estimation import cache

    panel = read_panel(sim_panel(tmp_path / "p.h5"))
    settings = Settings(metric="loglik", draws=100)
    result = cache.cached_estimate(panel, settings)
    assert cache.load(panel, settings) is not None
    meta = cache.cache_dir(panel) / (cache.cache_key(panel, settings) + ".json")
    import json

    record = json.loads(meta.read_text())
    record["sign"] = -record["sign"]
    meta.write_text(json.dumps(record))
    assert cache.load(panel, settings) is None
    assert result.overall.estimate == cache.cached_estimate(panel, settings).overall.estimate


# -- 6. a pilot without measurable noise -------------------------------------------------------------------------------


def test_a_pilot_whose_treated_instances_vary_only_by_rounding_is_refused(tmp_path, cli):
    d = simulate(SIM)
    y = d["values"]["loglik"].copy()
    treated = d["treatment"] != NEVER
    # treated instances: a level each plus a common path, changing alike up to float rounding
    rng = np.random.default_rng(0)
    y[treated] = rng.normal(0, 1, (treated.sum(), 1)) + np.linspace(0, 3, y.shape[1])[None, :]
    y[treated] += 1e-13 * rng.normal(size=y[treated].shape)
    path = create_panel(tmp_path / "p.h5", ids=d["ids"], treatment=d["treatment"], steps=d["steps"],
                        values={"loglik": y}, signs={"loglik": 1})  # fmt: skip
    err = assert_refused(cli("plan", path, "-B", "100", "--effect", "0.5"), "rounding")
    assert "treated" in err


def test_plan_sizes_never_exceed_any_corpus(tmp_path):
    """The class behind the 9.9e15: whatever the pilot, a row is a size a panel can have, or not reachable."""
    from memtui.estimation.plan import MAX_INSTANCES, Pilot, plan_sizes

    pilot = Pilot("loglik", np.array([0.0, 1e-20]), np.array([0.0, 1.0]), 1, 4, 48, 40, 6, None)
    plan = plan_sizes(pilot, [("D", 0.5), ("tiny", 1e-12)], cohorts=4, checkpoints=6, draws=0)
    for row in plan.rows:
        assert row.per_cohort is None or max(row.per_cohort, row.validation) <= MAX_INSTANCES
    assert plan.rows[0].per_cohort is None and "validation" in plan.rows[0].reason  # 2 per cohort, 4e10 validation
    assert plan.rows[1].per_cohort is None and "more than" in plan.rows[1].reason


# -- 7. nothing to test / rows too short ---------------------------------------------------------------------------


def test_a_metric_constant_over_checkpoints_has_no_pretrend_to_test(tmp_path, cli):
    d = simulate(SIM)
    n, t = d["values"]["loglik"].shape
    flat = np.repeat(np.random.default_rng(2).normal(size=(n, 1)), t, axis=1)  # each instance its own constant
    path = create_panel(tmp_path / "p.h5", ids=d["ids"], treatment=d["treatment"], steps=d["steps"],
                        values={"loglik": flat}, signs={"loglik": 1})  # fmt: skip
    code, out, err = cli("estimate", path, *FAST)
    assert code == 0, err
    assert not re.search(r"\bnan\b", out, re.IGNORECASE), out
    assert "pre-trends detected" not in out
    assert "nothing to test" in out


def short_rows_panel(path: Path, length: int = 40) -> Path:
    d = simulate(SIM)
    n = len(d["ids"])
    tokens = np.random.default_rng(0).integers(0, 100, (n, length))
    values = {"loglik": d["values"]["loglik"]}  # scored: loglik has values, extractability none (rows too short)
    return create_panel(path, ids=d["ids"], treatment=d["treatment"], steps=d["steps"], values=values,
                        tokens=tokens, signs={"loglik": 1})  # fmt: skip


def test_extractable_on_rows_shorter_than_k_plus_l_says_the_rows_are_too_short(tmp_path, cli):
    path = short_rows_panel(tmp_path / "p.h5")
    err = assert_refused(cli("estimate", path, *FAST, "-m", "extractable"), "shorter")
    assert "64" in err and "memtui extract" not in err, err


def test_build_warns_when_rows_are_shorter_than_k_plus_l(tmp_path, cli):
    n, length = 30, 40
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "t.npz", tokens=rng.integers(0, 100, (n, length)),
             treatment_step=np.r_[np.repeat([1000, 2000], 10), np.full(10, -1)])  # fmt: skip
    code, out, err = cli("build", tmp_path / "p.h5", "--tokens", tmp_path / "t.npz")
    assert code == 0, err
    assert "shorter than k + l = 64" in out + err


# -- 8. compare: names, and the pair of files --------------------------------------------------------------------


def test_local_models_get_unique_short_names(tmp_path, cli):
    deep = "/home/someone/experiments/a-rather-long-folder-name"
    panels = [
        sim_panel(tmp_path / f"p{i}.h5", replace(SIM, seed=i), attrs={"model": f"{deep}/exp{i}/checkpoints"})
        for i in (1, 2)
    ]
    code, out, err = cli("compare", *panels, "-B", "60", "--no-cache", "-o", tmp_path / "c.csv")
    assert code == 0, err
    rows = [line for line in out.splitlines() if "exp1" in line or "exp2" in line]
    names = [line.split()[0] for line in rows[:2]]
    assert len(set(names)) == 2 and all(len(n) <= 24 for n in names), names
    assert any("exp1" in n for n in names) and any("exp2" in n for n in names), names
    written = pl.read_csv(tmp_path / "c.csv")["model"].to_list()
    assert sorted(written) == sorted(names)


def test_a_failed_second_file_leaves_neither_changed(tmp_path, cli, monkeypatch):
    panels = [sim_panel(tmp_path / f"p{i}.h5", replace(SIM, seed=i), attrs={"model": f"m{i}"}) for i in (1, 2)]
    out = tmp_path / "c.csv"
    out.write_text("old table\n")
    (tmp_path / "c-correlations.csv").write_text("old correlations\n")
    real = pl.DataFrame.write_csv

    def full_disk(self, file=None, *a, **k):
        if file is not None and "correlations" in str(file):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, file, *a, **k)

    monkeypatch.setattr(pl.DataFrame, "write_csv", full_disk)
    assert_refused(cli("compare", *panels, "-B", "60", "--no-cache", "-o", out), "No space left")
    assert out.read_text() == "old table\n"
    assert (tmp_path / "c-correlations.csv").read_text() == "old correlations\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".csv" or ".tmp" in p.name) == [
        "c-correlations.csv",
        "c.csv",
    ]


# -- 9. one definition of persistent memorisation --------------------------------------------------------------------


def test_persistent_is_c_after_g_everywhere(tmp_path, cli):
    from memtui.app.summary_lines import post_persistent
    from memtui.estimation.results import persistent_cells

    panel = sim_panel(tmp_path / "p.h5")
    res = estimate(read_panel(panel), Settings(draws=100))
    ours = persistent_cells(res)
    assert ours["event_time"].min() > 0
    assert post_persistent(res)["event_time"].to_list() == ours["event_time"].to_list()

    code, _, err = cli("export", panel, "-o", tmp_path / "x.csv", "--scope", "persistent", "--all", "-B", "100")
    assert code == 0, err
    exported = pl.read_csv(tmp_path / "x.csv")
    assert exported["event_time"].to_list() == ours["event_time"].to_list()

    code, out, err = cli("estimate", panel, "-B", "100")
    shown = [int(m) for m in re.findall(r"c-g=(-?\d+)", out)]
    assert shown and min(shown) > 0, out
    assert "persistent (c > g)" in out


def test_the_docs_define_persistent_as_c_after_g():
    text = " ".join((ROOT / "docs" / "estimation.md").read_text().split())
    bullet = text[text.index("- **persistent**:") :][:300]
    assert "c > g" in bullet and "e = c − g > 0" in bullet, bullet
    assert "c > g *persistent*" in (ROOT / "README.md").read_text()


# -- 10. what the CLI says ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_result(tmp_path_factory):
    return estimate(read_panel(sim_panel(tmp_path_factory.mktemp("sim") / "p.h5")), Settings(draws=100))


def test_the_mde_line_keeps_the_sign(sim_result):
    from memtui.app.summary_lines import mde_line

    negative = replace(sim_result, instantaneous=sim_result.instantaneous.with_columns(pl.lit(-0.08).alias("estimate")))
    line = mde_line(0.8, negative)
    assert "is −0.10× that" in line, line  # the sign kept (and, since round 4, its trailing zero)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-0.0004, "-0.0004"), (0.0004, "0.0004"), (0.523, "0.52"), (-0.25, "-0.25"), (0.0, "0.00")],
)
def test_correlation_bounds_never_read_minus_zero(value, shown):
    from memtui.cli.numbers import fixed2

    assert fixed2(value) == shown


@pytest.mark.parametrize(
    ("p", "shown"), [(0.049, "0.049"), (0.05, "0.050"), (0.5, "0.500"), (0.0496, "0.0496"), (0.0001, "<0.001")]
)
def test_p_values_are_never_rounded_across_alpha(p, shown):
    from memtui.cli.numbers import p_value

    assert p_value(p) == shown


def test_pretrend_grammar_counts_one_cell(sim_result):
    from memtui.app.summaries import pretrend_text
    from memtui.estimation.results import Pretrend

    res = sim_result
    one = replace(res, pretrend=Pretrend(n_cells=780, n_significant=1, sup_t=3.1, p_value=0.02, crit=2.9))
    assert "1 of 780 pre-treatment (placebo) cells differs" in pretrend_text(one)
    two = replace(res, pretrend=Pretrend(n_cells=780, n_significant=2, sup_t=3.1, p_value=0.02, crit=2.9))
    assert "2 of 780 pre-treatment (placebo) cells differ " in pretrend_text(two)


def test_the_cli_prints_ascii_minus_signs(tmp_path, cli):
    neg = replace(SIM, effect=-1.0)
    panels = [sim_panel(tmp_path / f"p{i}.h5", replace(neg, seed=i), attrs={"model": f"m{i}"}) for i in (1, 2)]
    outputs = [
        cli("estimate", panels[0], *FAST),
        cli("compare", *panels, *FAST),
        cli("compare", panels[0], *FAST),
        cli("plan", panels[0], "-B", "100", "--effect", "0.5"),
        cli("info", panels[0]),
    ]
    for code, out, err in outputs:
        assert code == 0, err
        assert "−" not in out and "×" not in out, out
        assert "-" in out


def _readme_mpdta_command() -> list[str]:
    for line in (ROOT / "README.md").read_text().splitlines():
        if "memtui import mpdta.csv" in line:
            return shlex.split(line.split("#")[0])[1:]
    raise AssertionError("README has no mpdta example")


def test_the_readme_mpdta_example_imports_outcomes_only(tmp_path, cli):
    args = [a if a != "mpdta.csv" else str(ROOT / "tests" / "data" / "mpdta.csv") for a in _readme_mpdta_command()]
    args = [a if a != "P.h5" else str(tmp_path / "P.h5") for a in args]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "treat" not in read_panel(tmp_path / "P.h5").metrics


def test_import_says_which_columns_it_took_as_metrics(tmp_path, cli):
    mpdta = ROOT / "tests" / "data" / "mpdta.csv"
    code, out, err = cli("import", mpdta, tmp_path / "P.h5", "--unit", "countyreal", "--time", "year",
                         "--treatment", "first.treat", "--never-value", "0")  # fmt: skip
    assert code == 0, err
    line = next(line for line in out.splitlines() if "as metrics" in line)
    assert "lpop" in line and "lemp" in line and "treat" in line and "--metrics" in line, out


# -- the verbs this round touched still answer ------------------------------------------------------------------------


def test_compare_one_panel_shows_each_estimators_value(tmp_path, cli):
    code, out, err = cli("compare", sim_panel(tmp_path / "p.h5"), *FAST)
    assert code == 0, err
    table = out.split("by cohort")[1].splitlines()[2:]
    assert table and all("n/a" not in line for line in table[:3]), out


def test_plan_with_cohorts_option_runs(tmp_path, cli):
    code, out, err = cli("plan", sim_panel(tmp_path / "p.h5"), "-B", "100", "--cohorts", "3", "--effect", "0.5")
    assert code == 0, err
    assert "3 cohorts" in out
