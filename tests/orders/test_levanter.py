"""``memtui build --order levanter`` against Levanter's own code: its ``_prp.py`` permutations, ``EraShufflingDataset``,
``PermutationDataset`` and ``MixtureDataset`` (copied verbatim in tests/orders/levanter_ref/, see its README: PyPI's
levanter predates them) running on jax itself, on replicas of datasets whose rows carry their own numbers.

The keys are derived as ``src/levanter/main/train_lm.py`` and ``src/levanter/data/text.py`` derive them (their
modules import the whole trainer, so these few lines are transcribed here): ``data_key = split(PRNGKey(seed), 4)[0]``;
a mixture splits it into ``mix_key, shuffle_key`` and shuffles each dataset that ``build_caches("train")`` loads (those
of positive weight), in the config's order, with the next key of ``key_iterator(shuffle_key)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jaxtyping")
pytest.importorskip("async_lru")
ts = pytest.importorskip("tensorstore")
sys.path.insert(0, str(Path(__file__).parent / "levanter_ref"))

from levanter.data._prp import Permutation  # noqa: E402
from levanter.data.dataset import ListAsyncDataset  # noqa: E402
from levanter.data.mixture import MixtureDataset  # noqa: E402
from levanter.utils.jax_utils import key_iterator  # noqa: E402

from memtui.cli.main import main  # noqa: E402
from memtui.core.errors import MemtuiError  # noqa: E402
from memtui.orders import levanter_prng as prng  # noqa: E402
from memtui.orders.levanter import LevanterConfig, LevanterOrder, Source, open_run  # noqa: E402
from memtui.orders.levanter_perm import make_permutation  # noqa: E402
from memtui.panel.hdf5 import read_panel, read_tokens  # noqa: E402
from memtui.panel.model import NEVER  # noqa: E402

SEQ = 8


def test_prng_matches_jax(mode):
    for seed in (0, 7, 2**31 - 1):
        key, mine = jax.random.PRNGKey(seed), prng.prng_key(seed)
        assert (np.asarray(jax.random.split(key, 4)) == prng.split(mine, 4, mode)).all()
        assert (np.asarray(jax.random.fold_in(key, 12345)) == prng.fold_in(mine, 12345)).all()
        assert int(jax.random.randint(key, (), 0, 2**30)) == prng.randint_2_30(mine, mode)
        for n in (1, 3, 2048):
            assert (np.asarray(jax.random.bits(key, (n,), "uint32")) == prng.random_bits32(mine, n, mode)).all()
            x = np.arange(n, dtype=np.int32)
            assert (np.asarray(jax.random.permutation(key, x)) == prng.permutation(mine, x, mode)).all()


@pytest.mark.parametrize("kind", ["linear", "feistel"])
def test_permutations_match_levanter(mode, kind):
    for seed in (0, 11):
        for n in (1, 2, 97, 4096, 50_001):
            ref = Permutation.make(kind, n, jax.random.PRNGKey(seed))
            mine = make_permutation(kind, n, prng.prng_key(seed), mode)
            x = np.arange(n)
            assert (ref(x) == mine(x)).all()
            y = int(ref(np.array([n // 3]))[0])
            assert list(mine.preimages(y)) == [n // 3]


@pytest.mark.parametrize("kind", ["linear", "feistel"])
def test_large_permutation_float64(mode, kind):
    """Above ~10**8 rows Levanter's linear permutation is float64 arithmetic under NumPy 2: matched, and inverted."""
    n = 3_000_000_019
    ref = Permutation.make(kind, n, jax.random.PRNGKey(5))
    mine = make_permutation(kind, n, prng.prng_key(5), mode)
    x = np.random.default_rng(0).integers(0, n, 20_000)
    assert (ref(x) == mine(x)).all()
    assert kind == "feistel" or not mine.exact
    for xi, y in zip(x[:30].tolist(), mine(x[:30]).tolist(), strict=True):
        pre = mine.preimages(y)
        assert xi in pre.tolist() and (ref(pre) == y).all()


def _rows(n: int, name: str = ""):
    return ListAsyncDataset([(name, i) for i in range(n)], is_complete=True)


def _reference(lengths, weights, seed, shuffle, kind, block, positions):
    """Levanter's own datasets at ``positions``: (dataset, row) each."""
    data_key = jax.random.split(jax.random.PRNGKey(seed), 4)[0]
    mix_key, shuffle_key = jax.random.split(data_key)
    keys = key_iterator(shuffle_key)
    sets = {}
    for name, n in lengths.items():
        if weights[name] <= 0:  # build_caches("train") loads no dataset of weight 0
            continue
        ds = _rows(n, name)
        ds = (
            ds.shuffle(next(keys), perm_type=kind)
            if shuffle is True
            else ds.era_shuffle(shuffle, key=next(keys), perm_type=kind)
        )
        sets[name] = ds
    mix = MixtureDataset(sets, weights, block_size=block, key=mix_key)
    return mix.as_sync_dataset().get_batch([int(p) for p in positions])


@pytest.mark.parametrize(("shuffle", "kind"), [(True, "linear"), (True, "feistel"), (37, "linear")])
def test_mixture_order_matches_levanter(mode, shuffle, kind):
    lengths = {"web": 900, "off": 25, "code": 150, "math": 40}  # "off": weight 0 between others, takes no key
    weights = {"web": 0.6, "off": 0.0, "code": 0.3, "math": 0.1}
    positions = np.arange(3000)  # math and code restart several times
    offsets = np.cumsum([0, *lengths.values()])
    names = list(lengths)
    for seed in (0, 3):
        ref = _reference(lengths, weights, seed, shuffle, kind, 64, positions)
        config = LevanterConfig(
            sources=[Source(n, "", weights[n]) for n in names], seq_len=SEQ, batch=10, seed=seed, shuffle=shuffle,
            permutation=kind, block_size=64, mixture=True, prng=mode,
        )  # fmt: skip
        order = LevanterOrder(config, np.array(list(lengths.values())), total=3000)
        got = order.instance(positions)
        assert got.tolist() == [int(offsets[names.index(d)]) + r for d, r in ref]
        # exposures: every position holding an instance, counted directly from Levanter's order
        want = {}
        for p, (d, r) in enumerate(ref):
            want.setdefault(int(offsets[names.index(d)]) + r, []).append(p)
        sample = np.array(sorted(want)[::7])
        first, count = order.exposures(sample)
        assert first.tolist() == [want[i][0] for i in sample.tolist()]
        assert count.tolist() == [len(want[i]) for i in sample.tolist()]


@pytest.mark.parametrize("shuffle", [True, 100])
def test_single_dataset_matches_levanter(mode, shuffle):
    for seed in (0, 9):
        key = jax.random.split(jax.random.PRNGKey(seed), 4)[0]
        ds = _rows(1000)
        ds = (
            ds.shuffle(key, perm_type="linear")
            if shuffle is True
            else ds.era_shuffle(shuffle, key=key, perm_type="linear")
        )
        ref = [r for _, r in ds.as_sync_dataset().get_batch(list(range(1000)))]
        config = LevanterConfig(sources=[Source("a", "")], seq_len=SEQ, batch=10, seed=seed, shuffle=shuffle,
                                mixture=False, prng=mode)  # fmt: skip
        assert LevanterOrder(config, np.array([1000]), total=1000).instance(np.arange(1000)).tolist() == ref


# -- the CLI, on caches laid out as Levanter's JaggedArrayStore writes them --------------------------------------------


def _zarr3(path: Path, values: np.ndarray, dtype: str, shape_rest=()):
    """A tensorstore zarr3 array with ``store/jagged_array.py``'s ``_get_spec`` layout (sharded, blosc)."""
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "metadata": {
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256 * 1024 * 512]}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [256 * 1024], "codecs": [{"name": "blosc", "configuration": {"clevel": 5}}]}}],
        },
    }  # fmt: skip
    arr = ts.open(spec, dtype=dtype, shape=[2**54], create=True, delete_existing=True).result()
    arr[: len(values)].write(values).result()


def write_cache(folder: Path, dataset: int, rows: int, seed: int = 0):
    """A cache of ``rows`` rows of SEQ tokens (in a few documents); row r's first two tokens are (dataset, r)."""
    tokens = np.random.default_rng([seed, dataset]).integers(100, 1000, size=(rows, SEQ)).astype(np.int32)
    tokens[:, 0], tokens[:, 1] = dataset, np.arange(rows)
    flat = tokens.ravel()
    ends = np.unique(np.r_[np.arange(5, len(flat), 37), len(flat)])
    offsets = np.r_[len(ends), ends].astype(np.int64)  # element 0: the number of documents
    _zarr3(folder / "input_ids" / "offsets", offsets, "int64")
    _zarr3(folder / "input_ids" / "data", flat, "int32")
    return folder


LENGTHS = {"web": 3000, "code": 90, "math": 30}


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    return {n: str(write_cache(root / n, d, rows)) for d, (n, rows) in enumerate(LENGTHS.items())}


def _build(tmp_path, caches, *extra, name="p.h5"):
    out = tmp_path / name
    args = ["build", str(out), "--order", "levanter", "--caches", *(f"{n}={p}" for n, p in caches.items()),
            "--seq-len", str(SEQ), "--batch-size", "16", *extra]  # fmt: skip
    assert main(args) == 0
    return out


@pytest.mark.parametrize(("seed", "shuffle", "kind"), [(0, "50", "linear"), (4, "true", "feistel")])
def test_cli_panel_matches_levanter(tmp_path, caches, seed, shuffle, kind):
    """Every instance of the panel is the row Levanter's own mixture serves at its first position, treated at the
    first checkpoint after it; controls come no earlier than the panel's last step."""
    weights = {"web": 0.7, "code": 0.2, "math": 0.1}
    # a validation-only component (weight 0) is neither read nor keyed, as in Levanter: its cache need not exist
    with_val = {**caches, "val": str(tmp_path / "no such cache")}
    out = _build(tmp_path, with_val, "--weights", *(f"{n}={w}" for n, w in weights.items()), "val=0",
                 "--mixture-block-size", "64", "--trainer-seed",
                 str(seed), "--shuffle", shuffle, "--permutation-type", kind, "--steps", "20,40,60",
                 "--train-steps", "80", "-k", "5", "-m", "4", "--n-validation", "30")  # fmt: skip
    panel = read_panel(out)
    tokens, _ = read_tokens(out)
    positions = np.arange(80 * 16 + 64 * 30)
    ref = _reference(LENGTHS, weights, seed, True if shuffle == "true" else int(shuffle), kind, 64, positions)
    first_pos = {}
    for p, (d, r) in enumerate(ref):
        first_pos.setdefault((list(LENGTHS).index(d), r), p)
    treated = panel.treatment != NEVER
    assert treated.sum() > 0 and (~treated).sum() > 0
    assert list(panel.revisions) == ["step-19", "step-39", "step-59"]  # step-N: the state after N + 1 updates
    for row, treat in zip(tokens[:, :2].tolist(), panel.treatment.tolist(), strict=True):
        p = first_pos[tuple(row)]
        if treat == NEVER:
            assert p >= 60 * 16
        else:
            assert treat == min(c for c in (20, 40, 60) if c >= p // 16 + 1)


def test_single_dataset_cli(tmp_path, caches):
    out = _build(tmp_path, {"web": caches["web"]}, "--single-dataset", "--shuffle", "true", "--steps", "10,20",
                 "-k", "3", "-m", "3", "--n-validation", "20")  # fmt: skip
    tokens, _ = read_tokens(out)
    panel = read_panel(out)
    key = jax.random.split(jax.random.PRNGKey(0), 4)[0]
    ref = [r for _, r in _rows(3000).shuffle(key, perm_type="linear").as_sync_dataset().get_batch(list(range(3000)))]
    where = {r: p for p, r in enumerate(ref)}
    for row, treat in zip(tokens[:, 1].tolist(), panel.treatment.tolist(), strict=True):
        step = where[row] // 16 + 1
        assert (step > 20) if treat == NEVER else treat == (10 if step <= 10 else 20)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--caches", "web"], "NAME=DIR"),
        (["--caches", "a=/x", "a=/y"], "twice"),
        (["--caches", "a\tb=/x"], "not a dataset name"),
        (["--caches", "x" * 201 + "=/x"], "not a dataset name"),
        (["--caches", "a=/x", "--weights", "b=1"], "no --caches entry"),
        (["--caches", "a=/x", "--weights", "a=-1"], "number >= 0"),
        (["--caches", "a=/x", "--weights", "a=nan"], "number >= 0"),
        (["--caches", "a=/x", "--weights", "a=0"], "positive weight"),
        (["--caches", "a=/x", "--shuffle", "sometimes"], "era length"),
        (["--caches", "a=/x", "--shuffle", "-3"], "era length"),
        (["--caches", "a=/x", "--mixture-block-size", "65536"], "65535"),
        (["--caches", "a=/x", "--trainer-seed", "-1"], "jax seed"),
        (["--caches", "a=/x", "--data-seed", str(2**31)], "jax seed"),
        (["--caches", "a=/x", "b=/y", "--single-dataset"], "one cache"),
        (["--caches", "a=/x", "--single-dataset", "--mixture-block-size", "8"], "--mixture-block-size"),
        (["--caches", "a=/x", "--shuffle", "false", "--permutation-type", "linear"], "permutes nothing"),
        (["--caches", "a=/x", "--permutation-type", "feistel", "--numpy-semantics", "1"], "Feistel's is exact"),
        (["--caches", "a=/x", "--shuffle", "0"], "era length"),
        (["--caches", "a=/x", "--mixture-block-size", "0"], "65535"),
        (["--caches", "a=/x", "--seq-len", "0"], "at least 1"),
        (["--caches", "a=/nonexistent/cache", "--train-steps", "10"], "not a Levanter cache"),
        (["--caches", "a=/x"], "--train-steps"),
    ],
)
def test_refusals(tmp_path, capsys, extra, message):
    out = tmp_path / "p.h5"
    code = main(["build", str(out), "--order", "levanter", *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_era_feistel_short_era_in_mixture():
    """Levanter's own mixture fails on the short last era of an era-shuffled Feistel dataset (its length reaches
    ``next_power_of_two`` as an np.int64, which has no ``bit_length``); before it, the orders agree, and memtui
    refuses the rows Levanter could not serve."""
    ds = _rows(100, "a").era_shuffle(30, key=jax.random.PRNGKey(0), perm_type="feistel")
    mix = MixtureDataset({"a": ds}, {"a": 1.0}, block_size=16, key=jax.random.PRNGKey(1)).as_sync_dataset()
    config = LevanterConfig(sources=[Source("a", "")], seq_len=SEQ, batch=4, data_seed=0, shuffle=30,
                            permutation="feistel", block_size=16, mixture=True)  # fmt: skip
    order = LevanterOrder(config, np.array([100]), total=200)
    order.mixture.key = prng.prng_key(1)  # the test's MixtureDataset is keyed directly, not through split(data_key)
    order.shuffles[0].key = prng.prng_key(0)
    served = order.mixture.locate(np.arange(200))[1]
    full = np.flatnonzero(served < 90)[:60]
    assert order.instance(full).tolist() == [r for _, r in mix.get_batch(full.tolist())]
    late = int(np.flatnonzero(served >= 90)[0])
    with pytest.raises(AttributeError, match="bit_length"):
        mix.get_batch([late])
    with pytest.raises(MemtuiError, match="short last era"):
        order.instance(np.array([late]))


@pytest.mark.parametrize("kind", ["file", "empty", "damaged", "floats", "short"])
def test_bad_caches_refused(tmp_path, capsys, kind):
    """A file where the cache folder belongs, an empty folder, damaged metadata, float data, fewer tokens than a row."""
    cache = tmp_path / "c ache é"
    if kind == "file":
        cache.write_text("x")
    elif kind == "empty":
        cache.mkdir()
    elif kind == "damaged":
        (cache / "input_ids" / "offsets").mkdir(parents=True)
        (cache / "input_ids" / "offsets" / "zarr.json").write_bytes(np.random.default_rng(0).bytes(300))
    elif kind == "floats":
        _zarr3(cache / "input_ids" / "offsets", np.array([1, 64]), "int64")
        _zarr3(cache / "input_ids" / "data", np.zeros(64, dtype=np.float32), "float32")
    else:
        _zarr3(cache / "input_ids" / "offsets", np.array([1, SEQ - 1]), "int64")
        _zarr3(cache / "input_ids" / "data", np.zeros(SEQ - 1, dtype=np.int32), "int32")
    out = tmp_path / "p.h5"
    args = ["build", str(out), "--order", "levanter", "--caches", f"a={cache}", "--single-dataset", "--seq-len", "8"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("memtui: ") and err.count("\n") == 1 and "c ache" in err and not out.exists()


def test_validation_controls_refused(tmp_path, caches, capsys):
    out = tmp_path / "p.h5"
    args = ["build", str(out), "--order", "levanter", "--caches", f"web={caches['web']}", "--controls", "validation"]
    assert main(args) == 2
    assert "beyond" in capsys.readouterr().err and not out.exists()


def test_every_row_trained_refused(caches):
    config = LevanterConfig(sources=[Source("web", caches["web"])], seq_len=SEQ, batch=10, mixture=False)
    run = open_run(config, None)
    from memtui.orders.levanter import sample_levanter

    with pytest.raises(MemtuiError, match="every row is trained"):
        sample_levanter(run, [run.train_steps], k=2, m=2, n_controls=5)
