"""`--band calibrated|classic` on every verb that reports significance: the default is the calibrated band, the
classic one stays one option away, the CSVs record which band made them, and what the calibrated band cannot do is a
one-line refusal."""

from __future__ import annotations

import polars as pl
import pytest

from memtui.cli.main import main


@pytest.mark.parametrize("verb", ["estimate", "export", "compare", "plan"])
def test_every_significance_verb_offers_the_band(capsys, verb):
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--band {calibrated,classic,permutation}" in text
    assert "calibrated (studentised bootstrap-t" in text and "classic (R did's and the paper's" in text


def test_estimate_and_export_use_and_record_the_band(cli, small_panel, tmp_path):
    code, out, _ = cli("estimate", small_panel, "-B", "200")
    assert code == 0 and "calibrated simultaneous 95% band" in out
    code, out, _ = cli("estimate", small_panel, "-B", "200", "--band", "classic")
    assert code == 0 and "classic simultaneous 95% band" in out
    for band in ("calibrated", "classic"):
        csv = tmp_path / f"{band}.csv"
        code, _, _ = cli("export", small_panel, "-o", csv, "-B", "200", "--all", "--band", band)
        assert code == 0
        frame = pl.read_csv(csv)
        assert frame["band"].unique().to_list() == [band]
    cal, cls = (pl.read_csv(tmp_path / f"{b}.csv") for b in ("calibrated", "classic"))
    assert cal["estimate"].equals(cls["estimate"])  # the same estimates; only the bands differ
    assert not cal["band_low"].equals(cls["band_low"])


def test_mammen_weights_need_the_classic_band(cli, small_panel):
    code, out, err = cli("estimate", small_panel, "-B", "50", "--multiplier", "mammen")
    assert code == 2 and err.startswith("memtui: ") and err.count("\n") == 1
    assert "use --band classic for Mammen weights" in err
    code, out, _ = cli("estimate", small_panel, "-B", "50", "--multiplier", "mammen", "--band", "classic")
    assert code == 0 and "classic simultaneous" in out


def test_compare_gives_the_ease_the_chosen_band(cli, small_panel, tmp_path):
    out_csv = tmp_path / "cmp.csv"
    code, out, _ = cli("compare", small_panel, "-B", "100", "-o", out_csv)
    assert code == 0 and "calibrated band" in out
    assert "the ease band is the classic band" not in out  # the ease has its calibrated band now
    assert pl.read_csv(out_csv)["band"].unique().to_list() == ["calibrated"]
    code, out, _ = cli("compare", small_panel, "-B", "100", "--band", "classic")
    assert code == 0 and "classic band" in out and "the ease band is the classic band" not in out
