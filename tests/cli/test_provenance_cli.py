"""`memtui provenance PANEL`: the exact permutation test on the command line: the table, --json, a panel whose order
was shuffled after the fact (written as a file), and bad input refused in one line with exit 2, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np

from memtui.panel.model import NEVER

SAMPLES = Path(__file__).parents[2] / "sample_panels"


def test_table_and_json_on_a_real_panel(cli):
    code, out, err = cli("provenance", SAMPLES / "suite-neox-858k.h5", "--permutations", "99")
    assert code == 0, err
    assert "trained on this data in this order" in out and "exact p = 0.01 " in out
    assert out.count("\n") >= 41 + 4  # a row per checkpoint
    code, out, err = cli("provenance", SAMPLES / "suite-neox-858k.h5", "--permutations", "99", "--json")
    d = json.loads(out)
    assert d["rejects"] and d["p_value"] == 0.01 and len(d["checkpoints"]) == 41 and d["statistic"] == "change"
    assert d["checkpoints"][-1]["change_rho"] is None and "NaN" not in out  # strict JSON


def test_a_panel_shuffled_after_the_fact_is_not_rejected(cli, tmp_path):
    path = tmp_path / "shuffled.h5"
    shutil.copy(SAMPLES / "tiny-gptneox.h5", path)
    with h5py.File(path, "r+") as f:
        t = f["instances/treatment_step"][...]
        trained = np.flatnonzero(t != NEVER)
        t[trained] = np.random.default_rng(3).permutation(t[trained])
        f["instances/treatment_step"][...] = t
    code, out, err = cli("provenance", path, "--permutations", "199", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert not d["rejects"] and d["p_value"] > 0.05


def test_bad_input_exits_2_in_one_line(cli, tmp_path):
    before = sorted(SAMPLES.iterdir())
    for args in (
        (tmp_path / "none.h5",),
        (SAMPLES / "synthetic.h5", "--permutations", "5"),
        (SAMPLES / "synthetic.h5", "--alpha", "2"),
        (SAMPLES / "synthetic.h5", "--seed", "-1"),
        (SAMPLES / "synthetic.h5", "-m", "nope"),
    ):
        code, out, err = cli("provenance", *args)
        assert code == 2 and err.startswith("memtui: ") and err.count("\n") == 1 and not out, (args, err)
    for args in (("--statistic", "mean"), ("--permutations", "x")):
        try:
            code = cli("provenance", SAMPLES / "synthetic.h5", *args)[0]
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code
        assert code == 2, args
    assert sorted(SAMPLES.iterdir()) == before  # nothing written
