"""`memtui demo --seeds`, small: two data orders of one tiny GPT-NeoX, megatron-core's own maps, a seed suite built,
extracted and pooled end to end. What the trainers fed is the truth the panels' treatments are checked against."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER


def _megatron_or_skip() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("megatron.core.datasets.gpt_dataset", reason="megatron-core is not installed")
        pytest.importorskip("megatron.core.datasets.helpers_cpp", reason="megatron-core's C++ helpers are not built")


# the module's tests share one trained suite: in one xdist worker, or each worker would train it again (~30 s)
pytestmark = pytest.mark.xdist_group("demo-seeds")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    _megatron_or_skip()
    from memtui.demo.seeds import SeedsConfig, make_seeds

    out = tmp_path_factory.mktemp("seeds") / "suite"
    return make_seeds(out, SeedsConfig.small(), log=lambda m: None)


def _cohort(step: int, checkpoints) -> int:
    later = [int(c) for c in checkpoints if c >= step]
    return later[0] if later and step >= 1 else NEVER


def test_every_treatment_is_the_step_that_seed_fed_the_instance(demo):
    from memtui.demo.seeds import SeedsConfig

    cfg = SeedsConfig.small().base
    panels = [read_panel(p) for p in demo.panels]
    tokens, lengths = read_tokens(demo.panels[0])
    assert (lengths == cfg.seq_len).all()
    width = cfg.seq_len - 1  # a document: what a sequence trains as inputs (its last token is the next one's label)
    for name, panel in zip(demo.names, panels, strict=True):
        rows, steps = demo.fed[name]
        # the loop fed batch s = rows [(s-1)B, sB) of the order, every step once
        np.testing.assert_array_equal(steps, np.repeat(np.arange(1, cfg.steps + 1), cfg.batch))
        fed_at = {row[:width].tobytes(): int(s) for row, s in zip(rows, steps, strict=True)}
        assert len(fed_at) == len(rows)  # distinct documents: a document's tokens name the step that fed it
        np.testing.assert_array_equal(read_tokens(panel.path)[0], tokens)  # the same instances in every panel
        column = panel.provenance_attrs["seeds"].split(",").index(name)
        for i in range(panel.n_instances):
            step = fed_at.get(tokens[i, :width].astype(np.uint16).tobytes(), -1)
            if panel.provenance["position"][i] < 0:  # a held-out control: no trainer ever fed it
                assert step == -1 and panel.treatment[i] == NEVER
                continue
            assert panel.provenance["seed_steps"][i, column] == step
            assert panel.treatment[i] == _cohort(step, panel.steps)
    # the home seed's instances are its own sequences: all tokens equal the row its trainer fed at their position
    home_rows, _ = demo.fed[demo.names[0]]
    trained = panels[0].provenance["position"] >= 0
    np.testing.assert_array_equal(tokens[trained], home_rows[panels[0].provenance["position"][trained]])


def test_the_data_order_moves_most_instances(demo):
    a, b = (read_panel(p) for p in demo.panels)
    trained = a.provenance["position"] >= 0
    steps = a.provenance["seed_steps"][trained]
    assert np.mean(steps[:, 0] != steps[:, 1]) > 0.9
    assert np.mean(a.treatment[trained] != b.treatment[trained]) > 0.5
    assert a.attrs["seed_suite"] == b.attrs["seed_suite"] and a.attrs["seed"] != b.attrs["seed"]


def test_extraction_filled_every_checkpoint_from_one_initialisation(demo):
    panels = [read_panel(p) for p in demo.panels]
    for panel in panels:
        assert panel.done.all() and np.isfinite(panel.metrics["loglik"]).all()
        assert len(set(panel.weight_hashes)) == panel.n_checkpoints  # every checkpoint is another model
    a, b = (p.weight_hashes for p in panels)
    assert a[0] == b[0]  # step 0: the same initial weights under both seeds
    assert all(x != y for x, y in zip(a[1:], b[1:], strict=True))  # after it, the orders made different models
    # the validation rows rise under both seeds (the model learns), by the same checkpoints
    for panel in panels:
        val = panel.metrics["loglik"][panel.never_treated]
        assert val[:, -1].mean() > val[:, 0].mean() + 50


def test_the_pooled_profile_is_the_mean_of_the_seeds_own_estimates(demo):
    from memtui.estimation.estimate import estimate
    from memtui.estimation.settings import Settings

    pooled = demo.pooled
    own = {}
    for name, path in zip(demo.names, demo.panels, strict=True):  # each seed estimated alone, as `estimate` does
        cells = estimate(read_panel(path), Settings(metric="loglik", draws=0)).cells
        own[name] = {(g, c): e for g, c, e in zip(cells["cohort"], cells["checkpoint"], cells["estimate"], strict=True)}
    cells = pooled.cells
    assert cells.height >= 10
    for g, c, e in zip(cells["cohort"], cells["checkpoint"], cells["estimate"], strict=True):
        assert e == pytest.approx(np.mean([own[n][(g, c)] for n in demo.names]), rel=1e-9, abs=1e-9)
    inst = pooled.summaries["instantaneous"]
    assert inst.seeds.tolist() == pytest.approx(
        [np.mean([v for (g, c), v in own[n].items() if g == c]) for n in demo.names], rel=1e-9
    )
    assert set(pooled.agreement) >= {"profile", "instantaneous", "persistent"}


def test_the_report_states_each_seed_and_the_pooled_verdict(demo):
    text = demo.report.read_text()
    assert all(name in text for name in demo.names)
    assert "Pooled instantaneous memorisation is" in text and "| instantaneous |" in text
    assert f"{demo.pooled.summaries['instantaneous'].estimate:.4g}" in text


def test_the_cli_refuses_an_existing_suite_and_a_missing_megatron(demo, cli, monkeypatch, tmp_path):
    out = demo.panels[0].parent
    before = sorted(p.name for p in out.iterdir())
    code, _, err = cli("demo", "--seeds", out, "--small")
    assert code == 2 and "already holds" in err and err.strip().count("\n") == 0, err
    assert sorted(p.name for p in out.iterdir()) == before
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.gpt_dataset", None)  # as if it were not installed
    code, _, err = cli("demo", "--seeds", tmp_path / "new", "--small")
    assert code == 2 and "megatron-core" in err and err.strip().count("\n") == 0, err
    assert not os.path.exists(tmp_path / "new")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MEMTUI_DEMO_FULL") != "1", reason="minutes long: MEMTUI_DEMO_FULL=1")
def test_the_default_size_memorises_significantly_pooled(tmp_path):
    """Measured (docs/suites.md): pooled instantaneous 4.15 [3.87, 4.44] nats, 16 of 20 cells significant."""
    _megatron_or_skip()
    from memtui.demo.seeds import make_seeds

    made = make_seeds(tmp_path / "suite", log=lambda m: None)
    inst = made.pooled.summaries["instantaneous"]
    assert inst.estimate > 0 and inst.low > 0 and (inst.seeds > 0).all()
    cells = made.pooled.instantaneous
    assert ((cells["estimate"] > 0) & cells["significant"]).sum() >= cells.height // 2
