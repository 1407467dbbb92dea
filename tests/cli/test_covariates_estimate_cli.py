"""`memtui estimate --covariates` as a user drives it: one-line refusals, and the classic band (with a note) when no
band is asked for, since the calibrated one is not derived for doubly robust DiD."""

from __future__ import annotations

import numpy as np

from memtui.panel.hdf5 import read_panel


def test_cli_refuses_covariates_the_panel_lacks_in_one_line(cli, small_panel):
    code, out, err = cli("estimate", small_panel, "--covariates", "length,zlib", "--band", "classic", "-B", "0")
    assert code == 2
    assert "no covariate length, zlib" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("estimate", small_panel, "--covariates", "length", "--band", "calibrated")
    assert code == 2 and "--band classic" in err


def test_cli_covariates_without_band_use_the_classic_one_and_say_so(cli, small_panel):
    from memtui.panel.covariates import write_covariates

    n = len(read_panel(small_panel).ids)
    write_covariates(small_panel, {"x": np.random.default_rng(0).normal(size=n)})
    code, out, err = cli("estimate", small_panel, "--covariates", "x", "-B", "50", "--no-cache")
    assert code == 0, err
    assert err == "" and "classic simultaneous" in out  # the note follows the results (an error is one line)
    assert (
        out.splitlines()[-1] == "note           --covariates uses the classic band (R did's); the calibrated band "
        "is not derived for doubly robust DiD."
    )
