"""The one naming rule of covariates: what a table's column, ``--covariates``, ``--cluster`` and ``--by`` may name.

A covariate is an HDF5 dataset (``instances/covariates/NAME``) and a word in a ``--by`` expression
(``duplicates>=2``, ``2grp:quartiles``), so its name is 1 to 64 ASCII letters, digits and ``_``. Digits first are
allowed (users' tables have columns such as ``2grp`` or ``13gram_share``); a name of digits only too (``--by`` tells
a name from a value by its place). Everything else is refused by this one check, wherever the name comes from:
spaces and operators (they would split a ``--by`` expression), ``/`` and ``..`` (they would name another place in the
file), non-ASCII letters (two spellings of one letter would be two covariates), and names over 64 characters.
"""

from __future__ import annotations

import re

from memtui.core.errors import MemtuiError
from memtui.core.text import clean

MAX_COVARIATE_NAME = 64
COVARIATE_NAME = re.compile(rf"[A-Za-z0-9_]{{1,{MAX_COVARIATE_NAME}}}")
RULE = f"1 to {MAX_COVARIATE_NAME} ASCII letters, digits and '_'"


def is_covariate_name(name: object) -> bool:
    return isinstance(name, str) and COVARIATE_NAME.fullmatch(name) is not None


def check_covariate_name(name: object, where: str = "") -> str:
    """``name`` where it follows the rule, else a one-line refusal (``where``: what named it, e.g. ``--by``)."""
    if not is_covariate_name(name):
        prefix = f"{where} " if where else ""
        raise MemtuiError(f"{prefix}'{clean(name, 60)}' is not a covariate name: a covariate is named by {RULE}.")
    return name
