"""The one covariate naming rule (panel/names.py): what a table's column, the stored dataset and --by accept alike."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.core.errors import MemtuiError
from memtui.panel.hdf5 import checked_covariates
from memtui.panel.names import check_covariate_name, is_covariate_name

GOOD = ["length", "2grp", "13gram_share", "_x", "x" * 64, "A1_b2", "7"]
BAD = ["", "x" * 65, "café", "a/b", "..", "a.b", "a-b", "a b", "a>=b", "a:b", "ﬁle", "x\x00", "２grp", None, 3]


@pytest.mark.parametrize("name", GOOD)
def test_names_of_ascii_letters_digits_and_underscores_are_covariate_names(name):
    assert is_covariate_name(name) and check_covariate_name(name) == name
    assert list(checked_covariates({name: np.zeros(3)}, 3)) == [name]  # storage takes what the rule takes


@pytest.mark.parametrize("name", BAD)
def test_everything_else_is_refused_in_one_line_by_the_rule_and_by_storage(name):
    assert not is_covariate_name(name)
    with pytest.raises(MemtuiError, match="is not a covariate name") as exc:
        check_covariate_name(name, "--by")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("--by ")
    with pytest.raises(MemtuiError):
        checked_covariates({name: np.zeros(3)}, 3)
