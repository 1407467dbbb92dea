"""`memtui build --order datadecide`: one DataDecide run's OLMo order under several seeds, one panel per seed over the
same instances, each instance's treatment checked against OLMo's own shuffle under that seed (a transcription of
``_build_global_indices``: ``arange(n)`` shuffled by ``PCG64(seed + epoch)``); the panels pool as a seed suite and
extraction names their checkpoints as the hub does (``step{N}-seed-{name}``)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import yaml
from order_files import write_tokens

from memtui.extract.options import ExtractOptions
from memtui.orders.datadecide import checkpoint_interval, parse_seeds, positions_under, treatment_under
from memtui.orders.globalindices import ShuffledOrder
from memtui.orders.revisions import revision_name
from memtui.panel.hdf5 import read_panel, read_tokens
from memtui.panel.model import NEVER

L, BATCH = 16, 6
STEPS = [0, 3, 6, 9, 12]


def _config(folder, paths, **data):
    path = folder / "config.yaml"
    cfg = {"run_name": "DataDecide-test-4M", "seed": 6198, "model": {"max_sequence_length": L},
           "global_train_batch_size": BATCH, "data": {"paths": paths, "memmap_dtype": "uint32", **data}}  # fmt: skip
    path.write_text(yaml.safe_dump(cfg))
    return path


def _library_positions(n: int, seed: int) -> np.ndarray:
    """OLMo's order under ``seed`` (epoch 0), inverted: the position of each instance number."""
    order = np.arange(n, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(seed=seed)).shuffle(order)
    where = np.empty(n, dtype=np.int64)
    where[order] = np.arange(n)
    return where


@pytest.fixture
def run(tmp_path):
    counts = [60, 47, 55]
    paths = write_tokens(tmp_path, [n * L for n in counts], np.uint32, seed=5)
    (tmp_path / "held").mkdir()
    held = write_tokens(tmp_path / "held", [20 * L], np.uint32, seed=9)
    return tmp_path, paths, held, sum(counts)


def _build(cli, out, config, held, *extra):
    return cli("build", out, "--order", "datadecide", "--config", config, "--steps", ",".join(map(str, STEPS)),
               "-k", 2, "-m", 3, "--n-validation", 12, "--seed", 4, "--controls", "validation", "--heldout", *held,
               *extra)  # fmt: skip


@pytest.mark.parametrize("seeds", ["default,small-aux-2,small-aux-3", "15,4"])
def test_each_seeds_panel_has_that_seeds_treatments(tmp_path, cli, run, seeds):
    folder, paths, held, n = run
    code, _, err = _build(cli, folder / "dd.h5", _config(folder, paths), held, "--seeds", seeds)
    assert code == 0, err
    pairs = parse_seeds(seeds)
    panels = [read_panel(folder / f"dd-{name}.h5") for name, _ in pairs]
    home_tokens = read_tokens(folder / f"dd-{pairs[0][0]}.h5")[0]
    flat = np.concatenate([np.fromfile(p, dtype=np.uint32) for p in paths])
    for (name, number), panel in zip(pairs, panels, strict=True):
        np.testing.assert_array_equal(panel.ids, panels[0].ids)  # the same instances in every panel
        np.testing.assert_array_equal(read_tokens(panel.path)[0], home_tokens)
        assert panel.attrs["datadecide_seed"] == name and panel.attrs["seed_suite"] == panels[0].attrs["seed_suite"]
        where = _library_positions(n, number)
        trained = panel.provenance["position"] >= 0
        for i in np.flatnonzero(trained):
            inst = int(panel.ids[i])
            np.testing.assert_array_equal(home_tokens[i], flat[inst * L : (inst + 1) * L])  # the instance's window
            step = where[inst] // BATCH + 1  # OLMo: step s trains positions [(s - 1) B, s B)
            want = min((s for s in STEPS if s >= step), default=NEVER)
            assert panel.treatment[i] == want, (name, inst)
            assert panel.provenance["seed_steps"][i, pairs.index((name, number))] == step
        assert (panel.treatment[~trained] == NEVER).all()  # held-out rows: never trained under any seed
    # the seeds really are different orders: most instances change cohort
    moved = (panels[0].treatment != panels[1].treatment)[panels[0].provenance["position"] >= 0]
    assert moved.mean() > 0.3


def test_the_suite_pools_and_extraction_names_the_hubs_branches(tmp_path, cli, run):
    folder, paths, held, _ = run
    code, _, err = _build(cli, folder / "dd.h5", _config(folder, paths), held, "--seeds", "default,small-aux-2")
    assert code == 0, err
    from memtui.estimation.suite_load import is_seed_suite

    panels = [read_panel(folder / f"dd-{name}.h5") for name in ("default", "small-aux-2")]
    assert is_seed_suite(panels)
    for name, panel in zip(("default", "small-aux-2"), panels, strict=True):
        p = argparse.ArgumentParser()
        ExtractOptions.add_worker_arguments(p)
        args = p.parse_args(["--model", "allenai/DataDecide-dolma1_7-4M", "--revisions", "datadecide"])
        args.panel = panel.path
        template = ExtractOptions.from_args(args).validate().revision_template
        assert revision_name(template, 1250) == f"step1250-seed-{name}"
        assert panel.revisions == [f"step{s}-seed-{name}" for s in STEPS]


def test_a_fixed_data_seed_gives_every_seed_one_order(tmp_path, cli, run):
    folder, paths, held, _ = run
    code, _, err = _build(cli, folder / "dd.h5", _config(folder, paths, seed=77), held, "--seeds", "default,14")
    assert code == 0, err
    a, b = (read_panel(folder / f"dd-{name}.h5") for name in ("default", "small-aux-2"))
    np.testing.assert_array_equal(a.treatment, b.treatment)
    assert "data.seed 77 is set" in a.attrs["order_notes"]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (("--seeds", "default,7"), "DataDecide's seeds are default"),
        (("--seeds", "default,6198"), "names seed default twice"),
        (("--seeds", ","), "names no seed"),
        (("--global-indices", "x.npy"), "--global-indices belongs to --order olmo, not datadecide"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, cli, run, extra, match):
    folder, paths, held, _ = run
    code, _, err = _build(cli, folder / "dd.h5", _config(folder, paths), held, *extra)
    assert code == 2 and match in err and err.count("\n") == 1
    assert not list(folder.glob("dd*.h5"))


def test_a_suite_needs_held_out_controls(tmp_path, cli, run):
    folder, paths, _, _ = run
    code, _, err = cli("build", folder / "dd.h5", "--order", "datadecide", "--config", _config(folder, paths),
                       "--steps", "0,3,6", "--seeds", "default,small-aux-2")  # fmt: skip
    assert code == 2 and "--controls validation --heldout FILES" in err
    code, _, err = cli("build", folder / "one.h5", "--order", "datadecide", "--config", _config(folder, paths),
                       "--steps", "0,3,6", "-k", 1, "-m", 2, "--n-validation", 5)  # fmt: skip
    assert code == 0, err  # one seed: beyond controls are sound
    assert read_panel(folder / "one-default.h5").attrs.get("seed_suite") is None


def test_positions_under_a_shuffle_and_treatments():
    n = 1000
    ids = np.array([5, 999, 0, 421])
    where = _library_positions(n, 14)
    np.testing.assert_array_equal(positions_under(ShuffledOrder(n, 14), ids), where[ids])
    assert positions_under(np.arange(10), np.array([11]))[0] == -1
    step, treat = treatment_under(np.array([0, 5, 6, 40, -1]), batch=6, offset=0, steps=[0, 1, 3])
    assert step.tolist() == [1, 1, 2, 7, -1] and treat.tolist() == [1, 1, 3, NEVER, NEVER]
    assert checkpoint_interval("1B") == 2500 and checkpoint_interval("60M") == 1250


def test_a_seed_by_size_grid_is_one_build(tmp_path, cli, run):
    folder, paths, held, n = run
    (folder / "s").mkdir()
    small = _config(folder, paths)
    big_cfg = yaml.safe_load(small.read_text()) | {"global_train_batch_size": 4, "max_duration": f"{40 * 4 * L}T"}
    big = folder / "s" / "big.yaml"
    big.write_text(yaml.safe_dump(big_cfg))
    code, _, err = cli("build", folder / "grid.h5", "--order", "datadecide", "--size-configs", f"4M={small},1B={big}",
                       "--steps", "0,3,6,9,12", "-k", 2, "-m", 3, "--n-validation", 6, "--controls", "validation",
                       "--heldout", *held, "--seeds", "default,small-aux-3")  # fmt: skip
    assert code == 0, err
    for size, batch in (("4M", BATCH), ("1B", 4)):
        a, b = (read_panel(folder / f"grid-{size}-{seed}.h5") for seed in ("default", "small-aux-3"))
        assert a.attrs["datadecide_size"] == size and a.attrs["batch_size"] == str(batch)
        assert a.attrs["seed_suite"] == b.attrs["seed_suite"]
        where = _library_positions(n, 15)
        trained = b.provenance["position"] >= 0
        for i in np.flatnonzero(trained):
            step = where[int(b.ids[i])] // batch + 1
            assert b.treatment[i] == min((s for s in STEPS if s >= step), default=NEVER)
    assert (
        read_panel(folder / "grid-4M-default.h5").attrs["seed_suite"]
        != read_panel(folder / "grid-1B-default.h5").attrs["seed_suite"]
    )  # one suite per size: a size is another model


def test_grid_refusals_and_durations(tmp_path, cli, run):
    from memtui.orders.datadecide import duration_steps

    folder, paths, held, _ = run
    cfg = _config(folder, paths)
    for spec, match in [
        (f"5M={cfg}", "DataDecide has sizes"),
        (f"4M={cfg},4M={cfg}", "names size 4M twice"),
        ("4M", "is not SIZE=CONFIG"),
        (f"4M={folder / 'absent.yaml'}", "no such config file"),
    ]:
        code, _, err = cli("build", folder / "g.h5", "--order", "datadecide", "--size-configs", spec)
        assert code == 2 and match in err and err.count("\n") == 1, err
    code, _, err = cli(
        "build", folder / "g.h5", "--order", "datadecide", "--size-configs", f"4M={cfg}", "--config", cfg
    )
    assert code == 2 and "drop --config" in err
    for duration, steps in [(500, 500), ("1e3T", 1000 // (BATCH * L)), ("250", 250), ("2ep", None), (True, None)]:
        cfg.write_text(yaml.safe_dump(yaml.safe_load(cfg.read_text()) | {"max_duration": duration}))
        assert duration_steps(cfg) == steps


def test_compare_pooled_runs_over_the_seeds_panels(tmp_path, cli, run):
    """The suite's panels, once scored (here: simulated log-likelihoods that rise by 1 nat at treatment), pool."""
    from memtui.panel.hdf5 import create_panel

    folder, paths, held, _ = run
    code, _, err = _build(cli, folder / "dd.h5", _config(folder, paths), held, "--seeds", "default,small-aux-2",
                          "-m", 6)  # fmt: skip
    assert code == 0, err
    rng = np.random.default_rng(0)
    base = rng.normal(size=(len(read_panel(folder / "dd-default.h5").ids), 1))
    scored = []
    for name in ("default", "small-aux-2"):
        p = read_panel(folder / f"dd-{name}.h5")
        steps = np.asarray(p.steps)
        trained = (p.treatment[:, None] != NEVER) & (steps[None, :] >= p.treatment[:, None])
        y = base + 0.1 * rng.normal(size=(len(p.ids), len(steps))) + 1.0 * trained
        out = folder / f"scored-{name}.h5"
        create_panel(out, ids=p.ids, treatment=p.treatment, steps=p.steps, values={"loglik": y}, attrs=p.attrs)
        scored.append(out)
    code, out, err = cli("compare", *scored, "--pooled", "-B", 99, "--band", "classic")
    assert code == 0, err
    assert "pooled over 2 seeds (default, small-aux-2)" in out
    overall = float(next(line for line in out.splitlines() if line.startswith("overall")).split()[1])
    assert abs(overall - 1.0) < 0.1  # the simulated 1-nat effect, pooled across the two seeds' treatments
