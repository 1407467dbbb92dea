"""``memtui build --order pico`` against Pico's own reading of its data: a replica of the pretokenized Dolma (parquet
shards of 2049-id rows) streamed by ``datasets`` through pico-train's ``ShardedIterableDataset`` and DataLoader, and
stepped as its training loop steps (gradient accumulation, several ranks).

pico-train is not a package (a repo with ``src/`` and Lightning pins), so its reader is transcribed here from
github.com/pico-lm/pico-train at f0bfdf437c515b2a5cb4ef368ca594efeb6fb2ba: ``src/training/utils/data.py``
(``ShardedIterableDataset``, verbatim), ``src/training/utils/initialization.py`` (``initialize_dataloader``: sub-batch
``batch_size // (world_size · G)``, ``shuffle=False``) and ``src/training/trainer.py`` (``_training_loop``: a step
every G sub-batches, ``batch_step`` from 0; the checkpoint of step N is saved once ``batch_step`` reaches N).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.pico import ROW_TOKENS, VOCAB, commits_by_step, find_shards, pico_stage
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER

ROWS, SHARDS = 48, 4  # rows per shard, shards


def write_dolma(root, seed: int, rows: int = ROWS, shards: int = SHARDS, row_group: int = 20):
    """A replica of pico-lm/pretokenized-dolma: data/train-{k:05d}-of-{shards}.parquet, rows of 2049 ids; a row's
    first two ids are its global number (to find it in the library's batches)."""
    rng = np.random.default_rng(seed)
    data = root / "data"
    data.mkdir(parents=True)
    for k in range(shards):
        ids = rng.integers(0, VOCAB, size=(rows, ROW_TOKENS))
        number = k * rows + np.arange(rows)
        ids[:, 0], ids[:, 1] = number // VOCAB, number % VOCAB
        table = pa.table({"input_ids": pa.array(ids.tolist(), type=pa.list_(pa.int32()))})
        pq.write_table(table, data / f"train-{k:05d}-of-{shards}.parquet", row_group_size=row_group)
    return root


class ShardedIterableDataset:
    """pico-train's src/training/utils/data.py, verbatim but for the base class (an IterableDataset there)."""

    def __init__(self, dataset, rank, world_size):
        self.dataset = dataset
        self.rank = rank
        self.world_size = world_size

    def __iter__(self):
        iterator = iter(self.dataset)
        for _ in range(self.rank):
            next(iterator)
        while True:
            try:
                yield next(iterator)
                for _ in range(self.world_size - 1):
                    next(iterator)
            except StopIteration:
                break


def _collate(batch):  # initialize_dataloader's _collate_fn
    return {"input_ids": [entry["input_ids"] for entry in batch]}


def library_steps(root, batch: int, world: int, accumulation: int) -> dict[int, tuple[int, np.ndarray]]:
    """Row number -> (the trainer's batch_step that trained it, its ids), as pico-train's loop runs on every rank."""
    datasets = pytest.importorskip("datasets")
    torch = pytest.importorskip("torch")
    files = sorted(str(p) for p in (root / "data").glob("train-*.parquet"))
    base = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    sub = batch // (world * accumulation)

    class Sharded(ShardedIterableDataset, torch.utils.data.IterableDataset):
        pass

    seen = {}
    for rank in range(world):
        loader = torch.utils.data.DataLoader(
            Sharded(base, rank, world), batch_size=sub, shuffle=False, collate_fn=_collate
        )
        batch_step = 0
        for sub_step, sub_batch in enumerate(loader):
            for ids in sub_batch["input_ids"]:
                seen[ids[0] * VOCAB + ids[1]] = (batch_step, np.asarray(ids))
            if (sub_step + 1) % accumulation == 0:  # the optimizer steps; batch_step += 1
                batch_step += 1
    return seen


@pytest.mark.parametrize(("seed", "world", "accumulation"), [(3, 1, 1), (1234, 4, 2)])
def test_panel_rows_and_steps_equal_pico_trains_loop(tmp_path, cli, seed, world, accumulation):
    root = write_dolma(tmp_path / "dolma", seed)
    batch = 16
    lib = library_steps(root, batch, world, accumulation)
    assert len(lib) == ROWS * SHARDS and max(s for s, _ in lib.values()) == ROWS * SHARDS // batch - 1
    out = tmp_path / "pico.h5"
    steps = [0, 3, 6, 9]
    code, _, err = cli("build", out, "--order", "pico", "--dolma", root, "--batch-size", batch, "--steps", "0,3,6,9",
                       "-k", 2, "-m", 3, "--n-validation", 10, "--seed", seed % 5)  # fmt: skip
    assert code == 0, err
    panel, (tokens, _) = read_panel(out), read_tokens(out)
    assert (panel.treatment != NEVER).sum() == 3 * 2 * 3 and (panel.treatment == NEVER).sum() == 10
    for i in range(panel.n_instances):
        row = int(panel.provenance["position"][i])
        batch_step, ids = lib[row]
        np.testing.assert_array_equal(tokens[i], ids)
        if panel.treatment[i] != NEVER:  # trained by the checkpoint saved once batch_step reached N
            assert panel.treatment[i] == min(s for s in steps if s >= batch_step + 1)
        else:
            assert batch_step + 1 > max(steps)
    assert panel.attrs["order"] == "pico" and "Saving HF Model -- Step N" in panel.attrs["checkpoints"]


def test_heldout_controls_and_a_partial_mirror(tmp_path, cli):
    root = write_dolma(tmp_path / "dolma", 5)
    (root / "data" / "train-00002-of-4.parquet").unlink()  # a mirror of the first two shards only
    held = write_dolma(tmp_path / "held", 9, rows=30, shards=1)
    stage = pico_stage(root, batch=16)
    assert stage.files.n_instances == 2 * ROWS
    out = tmp_path / "pico.h5"
    code, _, err = cli("build", out, "--order", "pico", "--dolma", root, "--batch-size", 16, "--steps", "0,2,4,6",
                       "-k", 1, "-m", 2, "--n-validation", 7, "--controls", "validation",
                       "--heldout", held / "data" / "train-00000-of-1.parquet")  # fmt: skip
    assert code == 0, err
    panel = read_panel(out)
    assert (panel.treatment == NEVER).sum() == 7 and (
        panel.provenance["position"][panel.treatment == NEVER] == -1
    ).all()


def test_commits_by_step_reads_the_upload_titles():
    commits = [("Saving HF Model -- Step 2000", "c2b"), ("Saving Fabric Checkpoint -- Step 2000", "f2"),
               ("Saving HF Model -- Step 2000", "c2a"), ("Saving HF Model -- Step 1000", "c1"),
               ("Saving Tokenizer -- Step 0", "t0")]  # fmt: skip
    assert commits_by_step(commits) == {2000: "c2b", 1000: "c1"}


def _one_line(exc) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_bad_dolma_mirrors_are_refused_in_one_line(tmp_path):
    with pytest.raises(MemtuiError) as exc:
        find_shards(str(tmp_path / "nowhere"))
    assert "no such folder" in _one_line(exc)
    (tmp_path / "empty").mkdir()
    with pytest.raises(MemtuiError) as exc:
        find_shards(str(tmp_path / "empty"))
    assert "no shards named" in _one_line(exc)
    root = write_dolma(tmp_path / "gap", 1, shards=2)
    (root / "data" / "train-00000-of-2.parquet").unlink()
    with pytest.raises(MemtuiError) as exc:
        find_shards(str(root))
    assert "train-00000 is missing" in _one_line(exc)
    cases = {
        "not a readable parquet shard": lambda p: p.write_bytes(b"not parquet"),
        "no input_ids column": lambda p: pq.write_table(pa.table({"text": ["a"] * 3}), p),
        "not a list of token ids": lambda p: pq.write_table(pa.table({"input_ids": [[0.5] * 3] * 3}), p),
    }
    for expect, spoil in cases.items():
        root = write_dolma(tmp_path / expect.replace(" ", "-"), 2, shards=1)
        spoil(root / "data" / "train-00000-of-1.parquet")
        with pytest.raises(MemtuiError) as exc:
            pico_stage(root)
        assert expect in _one_line(exc)


def test_bad_rows_are_refused_when_read(tmp_path):
    root = write_dolma(tmp_path / "short", 2, shards=1)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]] * ROWS}), root / "data" / "train-00000-of-1.parquet")
    with pytest.raises(MemtuiError) as exc:
        pico_stage(root).files.read(np.array([5]))
    assert "3 token ids, expected 2049" in _one_line(exc)
    root = write_dolma(tmp_path / "huge", 2, shards=1)
    pq.write_table(pa.table({"input_ids": [[2**40] * ROW_TOKENS] * ROWS}), root / "data" / "train-00000-of-1.parquet")
    with pytest.raises(MemtuiError) as exc:
        pico_stage(root).files.read(np.array([5]))
    assert "outside the vocabulary" in _one_line(exc)
    root = write_dolma(tmp_path / "unequal", 2, shards=2)
    pq.write_table(pa.table({"input_ids": [[1] * ROW_TOKENS] * 5}), root / "data" / "train-00001-of-2.parquet")
    with pytest.raises(MemtuiError) as exc:
        pico_stage(root).files.read(np.array([ROWS + 1]))
    assert "5 rows, shard 0 has 48" in _one_line(exc)
