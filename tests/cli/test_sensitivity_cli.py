"""`memtui sensitivity` as a user drives it: the table and the quotable sentence, and one-line refusals."""

from __future__ import annotations


def test_sensitivity_prints_the_table_and_the_breakdown_sentence(cli, small_panel):
    code, out, err = cli("sensitivity", small_panel, "--method", "sd", "--grid", "0,0.5,1", "-B", "100")
    assert code == 0, err
    lines = out.splitlines()
    assert "instantaneous memorisation" in lines[0] and "95% CI under parallel trends" in out
    assert any(line.split()[:1] == ["0"] for line in lines) and any(line.split()[:1] == ["0.5"] for line in lines)
    assert "pre-trend" in lines[-1] and ("breakdown" in lines[-1] or "largest value tried" in lines[-1])


def test_sensitivity_refusals_are_one_line(cli, small_panel, tmp_path):
    for args, expect in [
        (("--base-period", "varying"), "universal base period"),
        (("--target", "sideways"), "target"),
        (("-B", "0"), "draws"),
    ]:
        code, out, err = cli("sensitivity", small_panel, *args)
        assert code == 2 and expect in err and len(err.strip().splitlines()) == 1, (args, err)
    code, _, err = cli("sensitivity", tmp_path / "missing.h5")
    assert code == 2 and len(err.strip().splitlines()) == 1
