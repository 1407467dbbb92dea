"""``memtui build --order neox --goldfish K,H`` on a megatron-core replica: each instance's masked targets are the
ones Apertus's Megatron (the ``apply_goldfish`` transcription of test_goldfish) masks on the library's own labels
(``GPTDataset[i]["labels"]``), the panel records the mask, says what it did in ``info``, and gets the trained-target
metrics; a panel without the option has none of it."""

from __future__ import annotations

import numpy as np
import pytest
from test_goldfish import megatron_loss_mask
from test_neox import BATCH, SEQ_LEN, _library_sequence, replica  # noqa: F401 - the module's replica fixture

from memtui.orders.goldfish import from_attrs
from memtui.panel import metrics as registry
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER


def _build(cli, replica, out, *extra):  # noqa: F811
    return cli("build", out, "--order", "neox", "--tokens", replica["prefix"], "--index-maps",
               replica["orders"][1].maps.prefix, "--batch-size", BATCH, "--seq-len", SEQ_LEN + 1, "--steps", "0,5,10",
               "-k", 2, "-m", 2, "--n-validation", 6, "--train-steps", 20, "--seed", 3, *extra)  # fmt: skip


@pytest.mark.parametrize(("k", "h"), [(3, 2), (2, 4)])
def test_the_panel_records_megatrons_mask_on_the_librarys_labels(tmp_path, cli, replica, k, h):  # noqa: F811
    out = tmp_path / "g.h5"
    code, _, err = _build(cli, replica, out, "--goldfish", f"{k},{h}")
    assert code == 0, err
    panel = read_panel(out)
    tokens, lengths = read_tokens(out)
    ds = replica["datasets"][1]
    dropped = panel.provenance["goldfish_dropped"]
    for i in range(panel.n_instances):
        pos = int(panel.provenance["position"][i])
        text = _library_sequence(ds, pos)  # the library's tokens + its last label: labels are text[1:]
        np.testing.assert_array_equal(tokens[i, : lengths[i]], text)
        assert dropped[i] == int((~megatron_loss_mask(text, k, h)).sum())
    assert dropped.sum() > 0
    assert set(registry.GOLDFISH) <= set(panel.metrics)
    assert from_attrs(panel.attrs, out).k == k and from_attrs(panel.attrs, out).h == h
    assert "hash-table" in panel.attrs["goldfish"] and "2971215073" in panel.attrs["goldfish"]
    assert f"{int(dropped.sum()):,} of the panel's" in panel.attrs["never_trained"]
    assert (panel.treatment != NEVER).any() and (panel.treatment == NEVER).any()  # no instance reclassified
    code, text, _ = cli("info", out)
    assert code == 0 and "goldfish loss" in text and "loglik_trained" in text


def test_without_the_option_the_panel_has_no_mask(tmp_path, cli, replica):  # noqa: F811
    out = tmp_path / "plain.h5"
    code, _, err = _build(cli, replica, out)
    assert code == 0, err
    panel = read_panel(out)
    assert not set(registry.GOLDFISH) & set(panel.metrics) and "goldfish_k" not in panel.attrs
    assert "goldfish_dropped" not in panel.provenance


@pytest.mark.parametrize("value", ["50", "0,50", "50,0", "a,b", "50,50,1", "", "1e3,5", "-2,3", "50;50"])
def test_a_bad_goldfish_option_is_one_line_and_writes_nothing(tmp_path, cli, replica, value):  # noqa: F811
    out = tmp_path / "bad.h5"
    code, _, err = _build(cli, replica, out, f"--goldfish={value}")  # "=": a value that starts with "-"
    assert code == 2 and "--goldfish takes K,H" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_other_orders_refuse_the_option(tmp_path, cli):
    code, _, err = cli("build", tmp_path / "p.h5", "--order", "pico", "--goldfish", "50,50")
    assert code == 2 and "--goldfish belongs to --order neox" in err
    assert not (tmp_path / "p.h5").exists()
