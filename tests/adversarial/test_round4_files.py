"""Issue 33, round 4: files, orders and covariates — values misread, and tracebacks where one line belongs.

The classes: a value read from a data order's JSON is what it claims to be (a token id is a JSON integer in the
vocabulary, not 47.9, ``true`` or 2**70) or its record is refused naming file and line; a path names a regular file
where a file belongs and a writable folder where a folder belongs (a folder, FIFO, device, NUL byte or read-only
mount is one line naming the option that moves the write); a third-party index's panic is one line, not a backtrace
flood; a covariate has one naming rule wherever it is named (table, storage, --covariates, --cluster, --by); a
refusal creates nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from memtui.core.errors import MemtuiError
from memtui.panel.covariates import write_covariates
from memtui.panel.hdf5 import create_panel, read_panel

from .conftest import assert_refused, run_memtui

T = 8  # token ids per Amber record here (Amber's are 2049)


# -- §2: Amber's token ids ---------------------------------------------------------------------------------------------


def _amber_chunks(folder: Path, bad: object = None, bad_line: int | None = None) -> Path:
    """Chunks 0..3 of four records each; the record at ``bad_line`` (1-based) of every chunk holds ``bad`` as an id."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(4):
        lines = []
        for n in range(1, 5):
            ids = [int(x) for x in np.arange(T) + 10 * n]
            if n == bad_line:
                ids[2] = bad
            lines.append(json.dumps({"token_ids": ids, "source": "c4"}))
        (folder / f"train_{k:03d}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("bad", [47.9, True, "47", 2**70, -1, 32000, None, 1e300])
def test_amber_ids_that_are_not_token_ids_refuse_their_record_naming_file_and_line(tmp_path, cli, bad):
    chunks = _amber_chunks(tmp_path / "train", bad, bad_line=3)
    out = tmp_path / "amber.h5"
    code, _, err = cli("build", out, "--order", "amber", "--chunks", chunks, "--steps", "0,1", "-k", "1", "-m", "4",
                       "--n-validation", "4", "--seq-len", T)  # fmt: skip
    line = assert_refused((code, "", err), "line 3")
    assert "train_00" in line and "token 2" in line
    assert not out.exists()


def test_amber_ids_in_the_vocabulary_are_stored_exactly(tmp_path, cli):
    chunks = _amber_chunks(tmp_path / "train", 31999, bad_line=3)
    out = tmp_path / "amber.h5"
    code, _, err = cli("build", out, "--order", "amber", "--chunks", chunks, "--steps", "0,1", "-k", "1", "-m", "4",
                       "--n-validation", "4", "--seq-len", T)  # fmt: skip
    assert code == 0, err
    from memtui.panel.hdf5 import read_tokens

    tokens, _ = read_tokens(out)
    hits = tokens == 31999
    assert hits[:, 2].sum() >= 2 and not hits[:, np.arange(T) != 2].any()  # line 3 of chunks 0 and 1, at token 2
    assert set(np.unique(tokens[~hits]).tolist()) <= {v for n in range(1, 5) for v in range(10 * n, 10 * n + T)}


@pytest.mark.parametrize("field,value", [("pt_loc", 47.9), ("pt_loc", True), ("perturbation_idx", "3"),
                                         ("pt_loc", 2**70), ("pt_injection_len", 0.5)])  # fmt: skip
def test_hubble_records_take_whole_numbers_only(tmp_path, field, value):
    from memtui.orders.hubble import read_perturbation_info

    good = {"perturbation_file": "a", "perturbation_idx": 0, "pt_loc": 5, "pt_injection_len": 4}
    path = tmp_path / "info.json"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, field: value}) + "\n")
    with pytest.raises(MemtuiError, match=rf"line 2: {field}"):
        read_perturbation_info(path)
    path.write_text(json.dumps(good) + "\n" + "[" * 100_000 + "\n")
    with pytest.raises(MemtuiError, match="line 2: not a JSON record"):
        read_perturbation_info(path)


# -- §3: OLMo configs --------------------------------------------------------------------------------------------------


def _token_files(folder: Path) -> list[str]:
    paths = []
    for i, n in enumerate((40, 30)):
        path = folder / f"part-{i}.npy"
        np.random.default_rng(i).integers(0, 50, n * 16).astype(np.uint32).tofile(path)
        paths.append(str(path))
    return paths


def _core_config(folder: Path, paths, name: str = "config.json", **dataset) -> Path:
    cfg = {"dataset": {"paths": paths, "sequence_length": 16, "dtype": "uint32", **dataset},
           "data_loader": {"global_batch_size": 6 * 16, "seed": 1}}  # fmt: skip
    path = folder / name
    path.write_text(json.dumps(cfg))
    return path


def _olmo_config(folder: Path, paths, name: str = "config.yaml") -> Path:
    cfg = {"seed": 1, "model": {"max_sequence_length": 16}, "global_train_batch_size": 6,
           "data": {"paths": paths, "memmap_dtype": "uint32"}}  # fmt: skip
    path = folder / name
    path.write_text(yaml.safe_dump(cfg))
    return path


SAMPLING = ("--steps", "0,2,4", "-k", "1", "-m", "1", "--n-validation", "3")


def test_olmo_core_config_with_a_nul_in_a_path_is_one_line(tmp_path, cli):
    paths = _token_files(tmp_path)
    config = _core_config(tmp_path, [paths[0], paths[1] + "\x00x"])
    assert_refused(cli("build", tmp_path / "o.h5", "--order", "olmo-core", "--config", config, *SAMPLING), "NUL")
    (tmp_path / "data_paths.txt").write_text(paths[0] + "\n" + paths[1] + "\x00\n")
    config = _core_config(tmp_path, [])
    assert_refused(cli("build", tmp_path / "o.h5", "--order", "olmo-core", "--config", config, *SAMPLING), "NUL")
    assert not (tmp_path / "o.h5").exists()


def test_configs_nested_100000_deep_are_one_line(tmp_path, cli):
    deep = tmp_path / "config.json"
    deep.write_text('{"dataset": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_refused(cli("build", tmp_path / "o.h5", "--order", "olmo-core", "--config", deep, *SAMPLING), "deeply")
    deep_yaml = tmp_path / "config.yaml"
    deep_yaml.write_text("data: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert_refused(cli("build", tmp_path / "o.h5", "--order", "olmo", "--config", deep_yaml, *SAMPLING))


def test_huge_numbers_in_a_config_are_refused_not_overflowed(tmp_path, cli):
    config = _core_config(tmp_path, _token_files(tmp_path), sequence_length=10**30)
    assert_refused(cli("build", tmp_path / "o.h5", "--order", "olmo-core", "--config", config, *SAMPLING),
                   "dataset.sequence_length")  # fmt: skip


# -- §3: a folder, a FIFO or a device where a file belongs -------------------------------------------------------------


@pytest.fixture
def odd_paths(tmp_path):
    folder = tmp_path / "a folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"folder": folder, "fifo": fifo, "device": Path("/dev/zero")}


def _where_a_file_belongs(tmp_path: Path, bad: Path) -> dict[str, list]:
    paths = _token_files(tmp_path)
    np.save(tmp_path / "t.npy", np.zeros((3, 4), dtype=np.int64))
    chunks = _amber_chunks(tmp_path / "train")
    rows = tmp_path / "rows.bin"
    rows.write_bytes(Path(paths[0]).read_bytes())
    return {
        "olmo token file": ["build", "--order", "olmo", "--config",
                            _olmo_config(tmp_path, [paths[0], str(bad)], "bad.yaml")],
        "olmo --heldout": ["build", "--order", "olmo", "--config", _olmo_config(tmp_path, paths),
                           "--controls", "validation", "--heldout", bad],
        "olmo-core token file": ["build", "--order", "olmo-core", "--config",
                                 _core_config(tmp_path, [str(bad)], "bad.json")],
        "olmo-core --data-paths": ["build", "--order", "olmo-core", "--config",
                                   _core_config(tmp_path, [], "empty.json"), "--data-paths", bad],
        "--config": ["build", "--order", "olmo", "--config", bad],
        "--global-indices": ["build", "--order", "olmo", "--config", _olmo_config(tmp_path, paths),
                             "--global-indices", bad],
        "amber --heldout": ["build", "--order", "amber", "--chunks", chunks, "--controls", "validation",
                            "--heldout", bad, "--seq-len", T],
        "--memmap": ["build", "--memmap", bad, "--validation", tmp_path / "t.npy"],
        "--validation": ["build", "--memmap", rows, "--validation", bad, "--seq-len", 16, "--batch-size", 2,
                         "--macro", 2],
        "--tokens": ["build", "--tokens", bad],
        "--treatment-file": ["build", "--tokens", tmp_path / "t.npy", "--treatment-file", bad],
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_folder_fifo_or_device_where_a_file_belongs_is_one_line_and_no_hang(tmp_path, cli, odd_paths, kind):
    bad = odd_paths[kind]
    out = tmp_path / "o.h5"
    for name, args in _where_a_file_belongs(tmp_path, bad).items():
        verb, *rest = args
        if kind == "fifo":  # in a child process: reading a FIFO would block forever
            result = run_memtui(verb, out, *rest, *SAMPLING[:2], timeout=60)
        else:
            result = cli(verb, out, *rest, *SAMPLING[:2])
        assert result[0] if isinstance(result, tuple) else result.code, f"{name} was accepted"
        line = assert_refused(result)
        assert str(bad) in line, f"{name}: {line}"
        assert ("folder" if kind == "folder" else "not a regular file") in line, f"{name}: {line}"
        assert not out.exists()


# -- §3: n-gram indexes ------------------------------------------------------------------------------------------------


def _panel_with_tokens(path: Path) -> Path:
    rng = np.random.default_rng(0)
    create_panel(path, ids=np.arange(6), treatment=np.array([1, 1, 2, 2, -1, -1]), steps=[0, 1, 2],
                 source_index=np.arange(6), tokens=rng.integers(0, 50, (6, 20)), lengths=np.full(6, 20))  # fmt: skip
    return path


def _corpus(folder: Path) -> Path:
    path = folder / "corpus.bin"
    np.random.default_rng(1).integers(0, 50, 5000).astype(np.uint16).tofile(path)
    return path


needs_tokengrams = pytest.mark.skipif(
    __import__("importlib").util.find_spec("tokengrams") is None, reason="tokengrams is not installed"
)


@needs_tokengrams
@pytest.mark.parametrize("damage", ["random bytes", "unsorted"])
def test_a_damaged_tokengrams_table_is_one_line_without_a_backtrace(tmp_path, damage):
    from memtui.orders.ngrams import CorpusCounts

    panel, corpus = _panel_with_tokens(tmp_path / "p.h5"), _corpus(tmp_path)
    assert CorpusCounts([corpus], log=lambda line: None).n_tokens == 5000  # builds the table beside the corpus
    table = tmp_path / "corpus.bin.tokengrams"
    if damage == "random bytes":
        table.write_bytes(np.random.default_rng(2).bytes(table.stat().st_size))
    else:  # the right size and values, two entries swapped: tokengrams asserts table.is_sorted()
        values = np.fromfile(table, dtype=np.uint64)
        values[[0, 1]] = values[[1, 0]]
        values.tofile(table)
    before = panel.read_bytes()
    result = run_memtui("covariates", panel, "--corpus", corpus, env={"RUST_BACKTRACE": "full"}, timeout=60)
    line = assert_refused(result, "is damaged; delete it to rebuild")
    assert str(table) in line or table.name in line
    assert "panicked" not in result.err and panel.read_bytes() == before


@needs_tokengrams
def test_a_corpus_on_a_read_only_mount_names_index_dir(tmp_path, cli, readonly_fs):
    panel = _panel_with_tokens(tmp_path / "p.h5")
    mount = readonly_fs(_corpus)
    line = assert_refused(cli("covariates", panel, "--corpus", mount / "corpus.bin", "--dry-run"), "--index-dir")
    assert "read-only" in line
    code, out, err = cli("covariates", panel, "--corpus", mount / "corpus.bin", "--dry-run", "--index-dir",
                         tmp_path / "idx")  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "idx" / "corpus.bin.tokengrams").is_file()


@needs_tokengrams
def test_index_dir_naming_a_file_is_refused_and_nothing_is_built(tmp_path, cli):
    panel, corpus = _panel_with_tokens(tmp_path / "p.h5"), _corpus(tmp_path)
    (tmp_path / "taken").write_text("mine")
    line = assert_refused(cli("covariates", panel, "--corpus", corpus, "--index-dir", tmp_path / "taken"),
                          "--index-dir")  # fmt: skip
    assert "not a folder" in line
    assert (tmp_path / "taken").read_text() == "mine"
    assert not list(tmp_path.glob("**/*.tokengrams"))
    assert_refused(cli("covariates", panel, "--corpus", corpus, "--index-dir", tmp_path / "taken" / "sub"))


# -- §3 / §4: covariate tables -----------------------------------------------------------------------------------------


def test_a_table_id_beyond_int64_is_one_line(tmp_path, cli, small_panel):
    for big in (2**70, 2**63 + 5):
        table = tmp_path / "t.csv"
        table.write_text(f"id,x\n0,1.5\n{big},2.5\n")
        assert_refused(cli("covariates", small_panel, "--from", table), "beyond int64")
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": pa.array([0, 2**64 - 1], pa.uint64()), "x": [1.0, 2.0]}), parquet)
    assert_refused(cli("covariates", small_panel, "--from", parquet), "beyond int64")
    assert not read_panel(small_panel).covariates


def test_a_table_with_a_repeated_column_is_refused(tmp_path, cli, small_panel):
    table = tmp_path / "t.csv"
    table.write_text("id,x,x\n0,1,2\n1,3,4\n")
    assert_refused(cli("covariates", small_panel, "--from", table), "'x' appears twice")
    table.write_text('id,"x",x\n0,1,2\n')
    assert_refused(cli("covariates", small_panel, "--from", table), "'x' appears twice")
    assert not read_panel(small_panel).covariates


@pytest.mark.parametrize("name", ["café", "a/b", "..", "x" * 300, "a b", "a>=b", "a.b", "grp-2"])
def test_one_naming_rule_refuses_the_same_names_in_a_table_and_in_by(tmp_path, cli, small_panel, name):
    table = tmp_path / "t.csv"
    table.write_text(f'id,"{name}"\n0,1.0\n1,2.0\n', encoding="utf-8")
    assert_refused(cli("covariates", small_panel, "--from", table), "is not a covariate name")
    assert not read_panel(small_panel).covariates
    if not any(c in name for c in " <>=!"):
        assert_refused(cli("estimate", small_panel, "--by", name, "-B", "0"), "is not a covariate name")
        assert_refused(cli("estimate", small_panel, "--by", f"{name}:quartiles", "-B", "0"), "is not a covariate name")


def test_a_name_that_starts_with_a_digit_works_with_by_covariates_and_cluster(tmp_path, cli, small_panel):
    n = read_panel(small_panel).n_instances
    rng = np.random.default_rng(0)
    table = tmp_path / "t.csv"
    pl.DataFrame({"id": read_panel(small_panel).ids, "2grp": rng.choice(["a", "b"], n),
                  "13x": rng.normal(size=n)}).write_csv(table)  # fmt: skip
    code, out, err = cli("covariates", small_panel, "--from", table)
    assert code == 0, err
    assert {"2grp", "13x"} <= set(read_panel(small_panel).covariates)
    uses = (["--by", "2grp"], ["--by", "13x:bins=0"], ["--by", "13x>=0"], ["--cluster", "2grp", "--band", "classic"],
            ["--covariates", "13x,2grp", "--band", "classic"])  # fmt: skip
    for args in uses:
        code, out, err = cli("estimate", small_panel, *args, "-B", "40", "--no-cache")
        assert code == 0, f"{args}: {err}"


@pytest.mark.parametrize("spec", ["num:²", "num:٣", "num:bins=nan", "num:bins=1,inf", "num>=nan", "num>=1e400"])
def test_by_specs_with_odd_digits_or_non_finite_numbers_are_one_line(cli, small_panel, spec):
    n = read_panel(small_panel).n_instances
    write_covariates(small_panel, {"num": np.random.default_rng(0).normal(size=n)})
    assert_refused(cli("estimate", small_panel, "--by", spec, "-B", "0"))


# -- §5.8: a constant covariate ----------------------------------------------------------------------------------------


def test_a_constant_covariate_is_named_by_covariates_and_warned_about_when_stored(tmp_path, cli, small_panel):
    panel = read_panel(small_panel)
    table = tmp_path / "t.csv"
    pl.DataFrame({"id": panel.ids, "length": np.full(panel.n_instances, 320.0),
                  "zlib": np.random.default_rng(0).normal(size=panel.n_instances)}).write_csv(table)  # fmt: skip
    code, out, err = cli("covariates", small_panel, "--from", table)
    assert code == 0, err
    assert "warning: covariate length is constant (320" in err and "zlib is constant" not in err
    code, _, err = cli("estimate", small_panel, "--covariates", "length,zlib", "--band", "classic", "-B", "0")
    assert code == 2 and "covariate length is constant (320" in err and "drop it" in err
    assert "collinear" not in err


# -- §3: demo --keep ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [[], ["--foreground"], ["--suite", "--foreground"], ["--inserted"], ["--seeds"]])
def test_demo_keep_naming_a_file_is_refused_and_creates_nothing(tmp_path, mode):
    keep = tmp_path / "keep"
    keep.write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / ("out.h5" if not {"--suite", "--inserted", "--seeds"} & set(mode) else "outdir")
    line = assert_refused(run_memtui("demo", out, *mode, "--small", "--keep", keep, timeout=60), "--keep")
    assert "not a folder" in line
    assert keep.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output folder, panel or log left behind


def test_demo_keep_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    assert_refused(run_memtui("demo", tmp_path / "out.h5", "--keep", tmp_path / "file" / "sub", timeout=60), "--keep")
    assert not (tmp_path / "out.h5").exists()


def test_demo_keep_on_a_read_only_mount_is_refused(tmp_path, readonly_fs):
    mount = readonly_fs()
    line = assert_refused(run_memtui("demo", tmp_path / "d", "--suite", "--keep", mount / "k", timeout=60), "--keep")
    assert "read-only" in line and not (tmp_path / "d").exists()
