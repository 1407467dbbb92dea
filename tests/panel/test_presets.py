"""Importing what Lesci et al. released, in exactly their schemas, and comparing memtui with their estimates.

The files are generated here with the dtypes the authors' code writes (scripts/export_runs.py in
pietrolesci/memorisation-profiles): per-instance statistics with ``seq_idx`` and ``step`` as int32 and the four
statistics as float64 (duckdb's ``list_avg``); per-token files with ``seq_idx`` int64, ``sup``/``entropy`` as
list<float32> and ``rank`` as list<int32> (one variant list<float64>/list<int64>), 2048 values per row. Sequence
indices include 0, exact multiples of 1,024,000 (the rows their own cohort code mis-assigns) and negatives
(validation).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtui.core.errors import MemtuiError
from memtui.estimation.estimate import estimate
from memtui.estimation.settings import Settings
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.importing import pythia_treatment_step
from memtui.panel.model import NEVER
from memtui.report.reference import compare_reference

T = 2048  # targets per 2049-token row
MACRO = 1024 * 1000  # rows per macro-batch: 1000 steps of 1024 rows
STEPS = np.arange(0, 11000, 1000)  # checkpoints 0 .. 10000
# per cohort j (treated at (j + 1) * 1000): its first row, the second, the middle, the last, and two more
OFFSETS = (0, 1, 511_999, MACRO - 1, 1234, 700_000)
N_COHORTS = 8  # cohorts 1000 .. 8000
SEQ_IDX = np.r_[
    [j * MACRO + o for j in range(N_COHORTS) for o in OFFSETS],
    -np.arange(1, 31),  # 30 validation sequences
].astype(np.int64)


def first_checkpoint(seq_idx) -> np.ndarray:
    """Independent of memtui: row r is trained in (1-based) step r // 1024 + 1; the first checkpoint (a multiple of
    1000) at or after that step is the first that has seen it."""
    out = []
    for r in np.asarray(seq_idx).tolist():
        out.append(NEVER if r < 0 else -(-(r // 1024 + 1) // 1000) * 1000)
    return np.array(out)


@dataclasses.dataclass
class TokenStats:
    """Per-token statistics of every (sequence, checkpoint): sup and entropy (float32), rank (int32)."""

    sup: np.ndarray  # (sequences, checkpoints, T)
    rank: np.ndarray
    entropy: np.ndarray


@pytest.fixture(scope="module")
def stats() -> TokenStats:
    rng = np.random.default_rng(5)
    n, t = len(SEQ_IDX), len(STEPS)
    g = first_checkpoint(SEQ_IDX)
    since = np.where(g[:, None] == NEVER, -1, (STEPS[None, :] - g[:, None]) // 1000)  # checkpoints since treatment
    effect = np.where(since >= 0, 0.4 * 0.5 ** np.maximum(since, 0) + 0.1, 0.0)  # nats less surprisal, per token
    level = rng.normal(3.0, 0.3, n)[:, None] + np.linspace(1.0, 0.0, t)[None, :] - effect
    sup = (level[..., None] + rng.normal(0, 1.0, (n, t, T))).astype(np.float32)
    entropy = (level[..., None] + rng.normal(0.2, 0.5, (n, t, T))).astype(np.float32)
    rank = rng.poisson(np.exp(level - 2.5)[..., None], (n, t, T)).astype(np.int32)
    # extractability: some rows reproduce the whole 32-token suffix (targets 31 .. 62), some part of it
    rank[:6, -1, 31:63] = 0
    rank[6:9, -1, 31:41] = 0
    rank[6:9, -1, 41] = 3
    return TokenStats(sup, rank, entropy)


def stats_frame(s: TokenStats) -> pl.DataFrame:
    """The per-instance table exactly as the authors aggregate the per-token one (list_avg, rank == 0 share)."""
    n, t = len(SEQ_IDX), len(STEPS)
    return pl.DataFrame(
        {
            "seq_idx": pl.Series(np.repeat(SEQ_IDX, t), dtype=pl.Int32),
            "step": pl.Series(np.tile(STEPS, n), dtype=pl.Int32),
            "sup_seq": s.sup.astype(np.float64).mean(-1).reshape(-1),
            "entr_seq": s.entropy.astype(np.float64).mean(-1).reshape(-1),
            "acc_seq": (s.rank == 0).mean(-1).reshape(-1),
            "avg_rank": s.rank.astype(np.float64).mean(-1).reshape(-1),
        }
    )


@pytest.fixture(scope="module")
def stats_file(tmp_path_factory, stats):
    path = tmp_path_factory.mktemp("stats") / "70m.parquet"
    stats_frame(stats).write_parquet(path)
    return path


FLOAT32, INT32 = pa.float32(), pa.int32()  # the per-token files' list types (one test uses float64/int64)


def _lists(matrix: np.ndarray, value_type) -> pa.Array:
    rows, width = matrix.shape
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1).astype(value_type.to_pandas_dtype())))


def write_token_folder(folder, s: TokenStats, *, floats=FLOAT32, ints=INT32, nested=True):
    """One parquet per checkpoint, named as the authors' runs are (data-pythia-deduped-70m-step{N}.parquet), inside
    a folder per run when ``nested``, with the rows in a shuffled order (files need not share one)."""
    rng = np.random.default_rng(1)
    for c, step in enumerate(STEPS):
        order = rng.permutation(len(SEQ_IDX))
        table = pa.table(
            {
                "seq_idx": pa.array(SEQ_IDX[order], pa.int64()),
                "sup": _lists(s.sup[order, c], floats),
                "rank": _lists(s.rank[order, c], ints),
                "entropy": _lists(s.entropy[order, c], floats),
            }
        )
        where = folder / f"pythia-deduped-70m-step{step}" if nested else folder
        where.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, where / f"data-pythia-deduped-70m-step{step}.parquet", row_group_size=50)
        (where / "hparams.yaml").write_text("model: 70m\n")  # the runs' other files are left alone
    return folder


@pytest.fixture(scope="module")
def token_folder(tmp_path_factory, stats):
    return write_token_folder(tmp_path_factory.mktemp("tokens"), stats)


@pytest.fixture(scope="module")
def stats_panel(tmp_path_factory, stats_file):
    from memtui.cli.main import main

    out = tmp_path_factory.mktemp("panel") / "p.h5"
    assert main(["import", "--preset", "pythia-stats", str(stats_file), str(out)]) == 0
    return read_panel(out)


def _row(panel, seq_idx) -> np.ndarray:
    """Rows of ``panel`` for the given sequence indices."""
    order = {int(v): i for i, v in enumerate(panel.ids)}
    return np.array([order[int(v)] for v in seq_idx])


# ------------------------------------------------------------------------------------------------- treatment rule


def test_treatment_step_at_macro_batch_edges():
    edges = np.array([0, 1, 1023, 1024, MACRO - 1, MACRO, MACRO + 1, 2 * MACRO - 1, 2 * MACRO, 140 * MACRO, -1, -7])
    expected = [1000, 1000, 1000, 1000, 1000, 2000, 2000, 2000, 3000, 141000, NEVER, NEVER]
    assert pythia_treatment_step(edges).tolist() == expected
    assert first_checkpoint(edges).tolist() == expected
    # int32 indices as the released files hold them, up to Pythia's last row
    last = np.array([143000 * 1024 - 1], dtype=np.int32)
    assert pythia_treatment_step(last).tolist() == [143000]


# -------------------------------------------------------------------------------------------- per-instance stats


def test_stats_import_treatment_and_metrics(stats_file, stats_panel, stats, cli, tmp_path):
    panel = stats_panel
    assert sorted(panel.ids.tolist()) == sorted(SEQ_IDX.tolist())
    rows = _row(panel, SEQ_IDX)
    np.testing.assert_array_equal(panel.treatment[rows], first_checkpoint(SEQ_IDX))
    for seq in (0, MACRO, 2 * MACRO, MACRO - 1):  # the edges the authors' cohort code gets wrong
        assert panel.treatment[_row(panel, [seq])[0]] == (seq // MACRO + 1) * 1000
    assert panel.treatment[_row(panel, [-1])[0]] == NEVER
    assert panel.steps.tolist() == STEPS.tolist() and panel.done.all()
    assert set(panel.metrics) == {"loglik", "accuracy", "rank", "entropy"}
    np.testing.assert_allclose(panel.metrics["loglik"][rows], -stats.sup.astype(np.float64).sum(-1), rtol=1e-12)
    np.testing.assert_allclose(panel.metrics["accuracy"][rows], (stats.rank == 0).mean(-1), rtol=1e-12)
    np.testing.assert_allclose(panel.metrics["rank"][rows], stats.rank.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(panel.metrics["entropy"][rows], stats.entropy.astype(np.float64).mean(-1), rtol=1e-12)
    assert {m: panel.sign(m) for m in panel.metrics} == {"loglik": 1, "accuracy": 1, "rank": -1, "entropy": -1}
    code, out, err = cli("import", "--preset", "pythia-stats", stats_file, tmp_path / "again.h5")
    assert code == 0 and err == ""
    assert out.splitlines()[0].startswith(
        f"wrote {tmp_path / 'again.h5'}: {len(SEQ_IDX)} instances ({N_COHORTS * len(OFFSETS)} treated in "
        f"{N_COHORTS} cohorts, 30 never treated), {len(STEPS)} checkpoints"
    )


@pytest.mark.parametrize("max_step", [5000, 5500])
def test_stats_max_step_drops_instances_treated_later(stats_file, cli, tmp_path, max_step):
    out = tmp_path / "first.h5"
    code, text, err = cli("import", "--preset", "pythia-stats", stats_file, out, "--max-step", max_step)
    assert code == 0, err
    panel = read_panel(out)
    assert panel.steps.tolist() == list(range(0, 6000, 1000))
    kept = SEQ_IDX[(first_checkpoint(SEQ_IDX) <= 5000)]  # validation (NEVER) included
    assert sorted(panel.ids.tolist()) == sorted(kept.tolist())
    assert (panel.treatment[panel.treatment != NEVER] <= 5000).all() and panel.never_treated.sum() == 30
    dropped = len(SEQ_IDX) - len(kept)
    assert dropped == 3 * len(OFFSETS)
    assert f"left out {dropped} instances first trained on after the last kept checkpoint" in text


# ----------------------------------------------------------------------------------------------- per-token files


def _extractable(rank: np.ndarray, k: int = 32, ell: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Independently: greedy decoding from k tokens reproduces token k + i (1-based) iff target k + i - 2 has rank 0."""
    run = np.zeros(rank.shape[:-1])
    for idx in np.ndindex(*rank.shape[:-1]):
        for i in range(1, ell + 1):
            if rank[idx][k + i - 2] != 0:
                break
            run[idx] = i
    return run, (run == ell).astype(float)


def test_token_folder_equals_stats_import(token_folder, stats_panel, stats, cli, tmp_path):
    out = tmp_path / "tokens.h5"
    code, text, err = cli("import", "--preset", "pythia-tokens", token_folder, out)
    assert code == 0, err
    panel = read_panel(out)
    assert panel.steps.tolist() == STEPS.tolist()
    rows, ref_rows = _row(panel, SEQ_IDX), _row(stats_panel, SEQ_IDX)
    np.testing.assert_array_equal(panel.treatment[rows], stats_panel.treatment[ref_rows])
    assert set(panel.metrics) == {"loglik", "accuracy", "rank", "entropy", "extractable", "extractable_len"}
    for m in stats_panel.metrics:
        np.testing.assert_allclose(panel.metrics[m][rows], stats_panel.metrics[m][ref_rows], rtol=1e-12, err_msg=m)
        assert panel.sign(m) == stats_panel.sign(m)
    run, flag = _extractable(stats.rank)
    np.testing.assert_array_equal(panel.metrics["extractable_len"][rows], run)
    np.testing.assert_array_equal(panel.metrics["extractable"][rows], flag)
    assert flag.sum() == 6 and (run == 10).sum() == 3  # the planted rows, and nothing by chance


def test_token_folder_is_read_batch_by_batch(monkeypatch, stats, tmp_path):
    """Small record batches (as for a real folder of GBs) and float64/int64 lists give the same panel."""
    from memtui.panel import presets

    folder = write_token_folder(tmp_path / "flat", stats, floats=pa.float64(), ints=pa.int64(), nested=False)
    whole = presets.import_preset("pythia-tokens", folder, tmp_path / "whole.h5")
    monkeypatch.setattr(presets, "_ROWS_PER_BATCH", 7)
    batched = presets.import_preset("pythia-tokens", folder, tmp_path / "batched.h5", max_step=3000)
    a, b = read_panel(whole.path), read_panel(batched.path)
    assert b.steps.tolist() == [0, 1000, 2000, 3000]
    keep = b.ids
    ra, rb = _row(a, keep), _row(b, keep)
    for m in a.metrics:
        np.testing.assert_array_equal(a.metrics[m][ra][:, :4], b.metrics[m][rb], err_msg=m)
    assert len(b.ids) == len(SEQ_IDX) - 5 * len(OFFSETS)  # cohorts 4000 .. 8000 left out
    assert any("left out 30 instances" in line for line in batched.lines())


# ------------------------------------------------------------------------------------------- build from the panel


def test_build_tokens_with_seq_idx(tmp_path, cli):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 50_000, (len(SEQ_IDX), 2049))
    path = tmp_path / "pile-deduped-subset.parquet"
    pl.DataFrame(
        {
            "seq_idx": pl.Series(SEQ_IDX, dtype=pl.Int64),
            "input_ids": pl.Series(ids.tolist(), dtype=pl.List(pl.Int32)),
        }
    ).write_parquet(path)
    code, out, err = cli("build", tmp_path / "p.h5", "--tokens", path)
    assert code == 0, err
    panel = read_panel(tmp_path / "p.h5")
    np.testing.assert_array_equal(panel.ids, SEQ_IDX)
    np.testing.assert_array_equal(panel.source_index, SEQ_IDX)
    np.testing.assert_array_equal(panel.treatment, first_checkpoint(SEQ_IDX))
    assert panel.steps.tolist() == [0, *range(1000, (N_COHORTS + 1) * 1000, 1000)]
    tokens, lengths = read_tokens(tmp_path / "p.h5")
    np.testing.assert_array_equal(tokens, ids)
    assert (lengths == 2049).all()
    assert out.startswith(f"built {tmp_path / 'p.h5'}: {len(SEQ_IDX)} instances ({N_COHORTS * len(OFFSETS)} treated")


def test_build_tokens_seq_idx_refusals(tmp_path, cli):
    dup = tmp_path / "dup.parquet"
    pl.DataFrame({"seq_idx": [0, 0, -1], "input_ids": [[1, 2, 3]] * 3}).write_parquet(dup)
    fractional = tmp_path / "float.parquet"
    pl.DataFrame({"seq_idx": [0.5, -1.0], "input_ids": [[1, 2, 3]] * 2}).write_parquet(fractional)
    for path, words in ((dup, "more than once"), (fractional, "training-order index")):
        code, out, err = cli("build", tmp_path / "p.h5", "--tokens", path)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and words in err, err
        assert not (tmp_path / "p.h5").exists()


# ---------------------------------------------------------------------------------------- the paper's estimates

SETTINGS = Settings(draws=200, seed=4)
FACTOR = {"sequence_surprisal": ("loglik", -2048.0), "token_accuracy": ("accuracy", 1.0), "average_rank": ("rank", 1.0)}


def paper_rows(panel, stat: str, model_size: str = "70m", base_period: str = "varying") -> pl.DataFrame:
    """memtui's own estimate written back in the paper's conventions: ATT of the per-token statistic (surprisal
    /-2048, no sign flip for rank), bands likewise, "*" for significant, and the base period as `differences` gives."""
    metric, factor = FACTOR[stat]
    res = estimate(panel, dataclasses.replace(SETTINGS, metric=metric, base_period=base_period))
    to_paper = 1 / (panel.sign(metric) * factor)
    c = res.cells
    low, high = c["band_low"].to_numpy() * to_paper, c["band_high"].to_numpy() * to_paper
    steps = list(panel.steps)
    cohort, time = c["cohort"].to_numpy(), c["checkpoint"].to_numpy()
    before = {s: steps[i - 1] if i else -1 for i, s in enumerate(steps)}
    if base_period == "varying":
        base = np.where(time < cohort, [before[t] for t in time], [before[g] for g in cohort])
    else:
        base = np.array([before[g] for g in cohort])
    frame = pl.DataFrame(
        {
            "cohort": cohort.astype(float),
            "base_period": base.astype(float),
            "time": time.astype(float),
            "ATT": c["estimate"].to_numpy() * to_paper,
            "std_error": c["std_error"].to_numpy() * abs(to_paper),
            "lower": np.minimum(low, high),
            "upper": np.maximum(low, high),
            "zero_not_in_cband": np.where(c["significant"].to_numpy(), "*", ""),
            "model_size": model_size,
            "stat": stat,
        }
    )
    if base_period == "universal":  # `differences` also lists the reference cell, 0 by construction
        ref = frame.unique("cohort").with_columns(
            pl.col("base_period").alias("time"), ATT=0.0, zero_not_in_cband=pl.lit("")
        )
        frame = pl.concat([frame, ref])
    return frame


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory, stats_panel):
    frames = [paper_rows(stats_panel, stat) for stat in FACTOR]
    other = paper_rows(stats_panel, "sequence_surprisal", model_size="160m").with_columns(pl.col("ATT") * 3)
    path = tmp_path_factory.mktemp("reference") / "estimates.parquet"
    pl.concat([*frames, other]).write_parquet(path)
    return path


@pytest.mark.parametrize(("metric", "stat"), [("loglik", "sequence_surprisal"), ("rank", "average_rank")])
def test_reference_from_memtui_agrees(stats_panel, reference_file, metric, stat):
    settings = dataclasses.replace(SETTINGS, metric=metric)
    comp = compare_reference(stats_panel, reference_file, settings, model_size="70m")
    assert comp.stat == stat and comp.metric == metric and comp.settings.base_period == "varying"
    own = estimate(stats_panel, settings).cells
    cells = comp.cells
    assert cells.columns[:8] == [
        "cohort",
        "checkpoint",
        "memtui_estimate",
        "reference_estimate",
        "difference",
        "memtui_significant",
        "reference_significant",
        "agree",
    ]
    assert cells.height == own.height == comp.n_reference == comp.n_memtui
    assert comp.max_difference <= 1e-9 * comp.scale
    assert cells["agree"].all() and cells["memtui_significant"].sum() > 5
    lines = comp.lines()
    assert lines[-1].startswith("verdict: memtui agrees with the reference")
    assert f"{cells.height} cells compared" in lines[1]
    assert f"significance agrees on {cells.height} of {cells.height} cells (100.0%)" in lines[3]


def test_reference_universal_base_period(stats_panel, tmp_path):
    path = tmp_path / "universal.csv"
    paper_rows(stats_panel, "sequence_surprisal", base_period="universal").write_csv(path)
    comp = compare_reference(stats_panel, path, SETTINGS)  # one model size: no need to choose
    assert comp.settings.base_period == "universal" and comp.agrees
    assert comp.n_reference == comp.cells.height  # the c = g - 1 reference cells are not compared


def test_reference_disagreement_is_reported(stats_panel, tmp_path):
    rows = paper_rows(stats_panel, "sequence_surprisal")
    post = (rows["time"] >= rows["cohort"]).to_numpy()
    flipped = np.where(post, np.where(rows["zero_not_in_cband"] == "*", "", "*"), rows["zero_not_in_cband"].to_numpy())
    path = tmp_path / "perturbed.parquet"
    rows.with_columns(
        ATT=pl.when(pl.Series(post)).then(pl.col("ATT") * 1.5).otherwise(pl.col("ATT")),
        zero_not_in_cband=pl.Series(flipped),
    ).write_parquet(path)
    comp = compare_reference(stats_panel, path, SETTINGS)
    own = estimate(stats_panel, SETTINGS).cells
    post_est = own.filter(~pl.col("pre_treatment"))["estimate"].to_numpy()
    assert comp.max_difference == pytest.approx(np.abs(0.5 * post_est).max(), rel=1e-9)
    assert comp.significance_agreement == pytest.approx(1 - post.mean())
    assert not comp.agrees
    verdict = comp.lines()[-1]
    assert verdict.startswith("verdict: memtui disagrees with the reference (estimates differ by up to")
    assert "significance differs on" in verdict


def test_reference_refusals(stats_panel, reference_file, tmp_path):
    with pytest.raises(MemtuiError, match=r"several model_size values \(160m, 70m\)"):
        compare_reference(stats_panel, reference_file, SETTINGS)
    with pytest.raises(MemtuiError, match="no model_size '12b'"):
        compare_reference(stats_panel, reference_file, SETTINGS, model_size="12b")
    rows = paper_rows(stats_panel, "sequence_surprisal")
    rows.drop("zero_not_in_cband", "stat").write_parquet(tmp_path / "columns.parquet")
    with pytest.raises(MemtuiError, match="no column zero_not_in_cband, stat"):
        compare_reference(stats_panel, tmp_path / "columns.parquet", SETTINGS)
    rows.with_columns(pl.col("cohort") + 500, pl.col("time") + 500).write_parquet(tmp_path / "shifted.parquet")
    with pytest.raises(MemtuiError, match="no cell of .* matches"):
        compare_reference(stats_panel, tmp_path / "shifted.parquet", SETTINGS)
    mixed = rows.with_columns(
        base_period=pl.when(pl.col("time") == 1000).then(pl.col("cohort") - 1000).otherwise(pl.col("base_period"))
    )
    mixed.write_parquet(tmp_path / "mixed.parquet")
    with pytest.raises(MemtuiError, match="mixes a varying and a universal base period"):
        compare_reference(stats_panel, tmp_path / "mixed.parquet", SETTINGS)
    two = pl.concat([paper_rows(stats_panel, "token_accuracy"), paper_rows(stats_panel, "average_rank")])
    two.write_parquet(tmp_path / "two.parquet")
    with pytest.raises(MemtuiError, match="pick one: -m rank for average_rank, -m accuracy for token_accuracy"):
        compare_reference(stats_panel, tmp_path / "two.parquet", SETTINGS)


# ------------------------------------------------------------------------------------------------ bad input, CLI


def test_presets_match_the_parser():
    from memtui.cli.import_table import IMPORT_PRESETS
    from memtui.panel.presets import PRESETS

    assert IMPORT_PRESETS == PRESETS


def _one_line_refusal(cli, *args, words: str):
    code, out, err = cli(*args)
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("memtui: ") and words in err, err


def test_bad_files_are_refused_in_one_line(stats, stats_file, token_folder, tmp_path, cli):
    out = tmp_path / "p.h5"
    no_acc = tmp_path / "no_acc.parquet"
    stats_frame(stats).drop("acc_seq").write_parquet(no_acc)
    text = tmp_path / "text.parquet"
    stats_frame(stats).with_columns(pl.col("sup_seq").cast(pl.String)).write_parquet(text)
    nameless = tmp_path / "nameless"
    nameless.mkdir()
    pq.write_table(pa.table({"seq_idx": [1]}), nameless / "data.parquet")
    flat = tmp_path / "flat"
    flat.mkdir()
    pq.write_table(
        pa.table({"seq_idx": [0, -1], "sup": [1.0, 2.0], "rank": [[0], [1]], "entropy": [[1.0], [2.0]]}),
        flat / "step1000.parquet",
    )
    uneven = tmp_path / "uneven"
    uneven.mkdir()
    pq.write_table(
        pa.table({"seq_idx": [0, -1], "sup": [[1.0, 2.0], [2.0]], "rank": [[0], [1]], "entropy": [[1.0], [2.0]]}),
        uneven / "step1000.parquet",
    )
    text_index = tmp_path / "text_index"
    text_index.mkdir()
    pq.write_table(
        pa.table({"seq_idx": ["0", "-1"], "sup": [[1.0], [2.0]], "rank": [[0], [1]], "entropy": [[1.0], [2.0]]}),
        text_index / "step1000.parquet",
    )
    cases = [
        (("import", "--preset", "pythia-stats", no_acc, out), "no column acc_seq"),
        (("import", "--preset", "pythia-stats", text, out), "column 'sup_seq' must hold numbers"),
        (("import", "--preset", "pythia-stats", token_folder, out), "is a folder"),
        (("import", "--preset", "pythia-stats", stats_file, out, "--max-step", -5), "--max-step must be 0 or more"),
        (("import", "--preset", "pythia-stats", stats_file, out, "--treatment", "x"), "drop --treatment"),
        (("import", "--preset", "pythia-tokens", stats_file, out), "reads a folder"),
        (("import", "--preset", "pythia-tokens", tmp_path / "missing", out), "no such folder"),
        (("import", "--preset", "pythia-tokens", nameless, out), "no 'step<N>' in its name"),
        (("import", "--preset", "pythia-tokens", flat, out), "column 'sup' must hold a list per row"),
        (("import", "--preset", "pythia-tokens", uneven, out), "lists of different lengths"),
        (("import", "--preset", "pythia-tokens", text_index, out), "column 'seq_idx' must hold whole"),
        (("import", "--preset", "pythia-tokens", token_folder, out, "--max-step", 0), "before the first cohort"),
        (("import", stats_file, out, "--from-seq-idx", "--max-step", 5000), "--max-step works with --preset"),
    ]
    for args, words in cases:
        _one_line_refusal(cli, *args, words=words)
        assert not out.exists()
