"""memtui.orders.goldfish against the Goldfish mask as Apertus's Megatron applies it, run in torch.

``megatron_create_hash_table`` and ``megatron_apply_goldfish`` below are transcribed from github.com/swiss-ai/
Megatron-LM at commit 81d44dbe25c22190989fa8a12284bdb8d1303b40, ``megatron/core/datasets/gpt_dataset.py``
(``_create_hash_table``, ``apply_goldfish`` and the lines of ``GPTDataset.__getitem__`` around them), and
``authors_apply_goldfish`` from github.com/ahans30/goldfish-loss at 35d29f96553462f6c30417f8065225aa6b89e172,
``lit_gpt/utils.py`` (its "hash-table" branch). Neither is installable (Megatron-LM's fork is not on PyPI, the
authors' is a training script), so the tests run these lines on token rows made here: Apertus's vocabulary (131,072),
its sample length (4,097 tokens), rows holding zeros and the pad id, short rows, and several k and h.
"""

from __future__ import annotations

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.orders.goldfish import TABLE_SIZE, Goldfish, hash_table, parse

torch = pytest.importorskip("torch")

_GOLDFISH_TOKEN_ID = -2
_HASH_TABLE_SIZE = 1_000_003


def megatron_create_hash_table(device):
    rng = torch.Generator(device=device)
    rng.manual_seed(2971215073)
    return torch.rand(_HASH_TABLE_SIZE, device=device, generator=rng)


def megatron_apply_goldfish(labels, goldfish_token_id, k, goldfish_hash_table, goldfish_context_width=4):
    assert labels.ndim == 1
    masked_labels = labels.clone()
    hashed_keys = goldfish_hash_table[labels.unfold(0, goldfish_context_width, 1).prod(dim=-1) % _HASH_TABLE_SIZE]
    dropped_token_indices = hashed_keys < 1 / k
    masked_labels[goldfish_context_width - 1 :][dropped_token_indices] = goldfish_token_id
    return masked_labels


def megatron_loss_mask(text: np.ndarray, k: int, h: int, pad_token_id: int = -1):
    """``GPTDataset.__getitem__``'s loss mask of one sample (eod_mask_loss off: all ones before the masks)."""
    text = torch.from_numpy(text).long()
    labels = text[1:].contiguous()
    loss_mask = torch.ones(len(labels), dtype=torch.float)
    loss_mask[labels == pad_token_id] = 0.0
    labels[labels == pad_token_id] = 0
    table = megatron_create_hash_table(device=labels.device)
    goldfish_labels = megatron_apply_goldfish(labels, _GOLDFISH_TOKEN_ID, k, table, h)
    loss_mask[goldfish_labels == _GOLDFISH_TOKEN_ID] = 0.0
    return loss_mask.numpy() == 1.0


def authors_apply_goldfish(targets, k, ignore_index, goldfish_context_width):  # strategy "hash-table"
    table = megatron_create_hash_table(targets.device)
    masked_targets = targets.clone()
    hashed_keys = table[targets.unfold(1, goldfish_context_width, 1).prod(dim=-1) % _HASH_TABLE_SIZE]
    dropped_token_indices = hashed_keys < 1 / k
    masked_targets[:, goldfish_context_width - 1 :][dropped_token_indices] = ignore_index
    return masked_targets


def test_the_table_is_torchs_cpu_rand():
    ref = megatron_create_hash_table("cpu").numpy()
    ours = hash_table()
    assert ours.dtype == np.float32 and ours.shape == (TABLE_SIZE,)
    np.testing.assert_array_equal(ours, ref)


def _rows(seed: int):
    rng = np.random.default_rng(seed)
    yield rng.integers(0, 131_072, size=4097)  # an Apertus sample: 4,096 + 1 tokens
    yield rng.integers(0, 50, size=3000)  # small ids: products that do not overflow for small h, hashes that repeat
    row = rng.integers(0, 131_072, size=600)
    row[rng.random(600) < 0.05] = 0  # zeros: the key is 0
    yield row
    yield np.full(300, 7, dtype=np.int64)  # one repeated window: all dropped or none
    yield rng.integers(0, 2**31 - 1, size=700)  # int32 token files at their largest


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("k", "h"), [(50, 50), (4, 13), (2, 1), (7, 3), (1000, 64), (3, 2)])
def test_the_mask_equals_megatrons_loss_mask(seed, k, h):
    gf = Goldfish(k, h)
    seen = 0
    for text in _rows(seed):
        expected = megatron_loss_mask(text, k, h)
        got = gf.trained(text[1:])
        np.testing.assert_array_equal(got, expected)
        seen += int((~got).sum())
        # and the authors' batched function on the same labels
        labels = torch.from_numpy(text[1:].astype(np.int64))[None]
        authors = authors_apply_goldfish(labels, k, -100, h)[0].numpy() != -100
        np.testing.assert_array_equal(gf.dropped(text[1:]), ~authors & (np.arange(len(text) - 1) >= h - 1))
    assert seen > 0  # something was dropped: the comparison is not between two all-True arrays


def test_the_apertus_rate_is_about_one_in_fifty():
    rng = np.random.default_rng(3)
    dropped = np.concatenate([Goldfish().dropped(rng.integers(0, 131_072, size=4096)) for _ in range(50)])
    assert 0.015 < dropped[49:].mean() < 0.025  # 1/k = 2 % of the labels past the first h - 1


def test_pad_ids_are_hashed_as_zero_and_never_trained():
    rng = np.random.default_rng(4)
    text = rng.integers(1, 1000, size=900)
    text[rng.random(900) < 0.1] = 3
    for k, h in ((3, 2), (50, 50), (5, 4)):
        np.testing.assert_array_equal(Goldfish(k, h, pad=3).trained(text[1:]), megatron_loss_mask(text, k, h, 3))


def test_short_rows_and_prefixes():
    gf = Goldfish(2, 5)
    assert not gf.dropped(np.arange(1, 5)).any()  # shorter than h: nothing dropped
    assert gf.dropped(np.zeros(0, np.int64)).shape == (0,)
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 100, size=400)
    full = gf.dropped(labels)
    for cut in (5, 6, 77, 399):
        np.testing.assert_array_equal(gf.dropped(labels[:cut]), full[:cut])  # a prefix's mask is the mask's prefix


def test_trained_targets_of_padded_rows():
    gf = Goldfish(3, 2)
    rng = np.random.default_rng(6)
    tokens = rng.integers(0, 100, size=(3, 40))
    lengths = np.array([40, 1, 17])
    got = gf.trained_targets(tokens, lengths)
    np.testing.assert_array_equal(got, np.concatenate([gf.trained(tokens[0, 1:]), gf.trained(tokens[2, 1:17])]))


@pytest.mark.parametrize("text", ["50", "50,0", "a,b", "1,2,3", "-1,5", "1e3,2", "5,2000000", "", "٣,5"])
def test_bad_goldfish_options_are_refused_in_one_line(text):
    with pytest.raises(MemtuiError) as err:
        parse(text)
    assert "\n" not in str(err.value) and "--goldfish" in str(err.value)


def test_parse_and_bad_values():
    assert parse("50,50") == Goldfish(50, 50) and parse(" 4, 13") == Goldfish(4, 13)
    for bad in ({"k": 0}, {"h": True}, {"k": 2.5}):
        with pytest.raises(MemtuiError):
            Goldfish(**bad)
