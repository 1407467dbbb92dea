"""Values read from the JSON and JSONL files of a data order, taken only as what they claim to be.

Python's ``int()`` turns 47.9 into 47, ``true`` into 1 and ``"47"`` into 47, and numpy overflows on 2**70: a record
holding such a value would be stored as another instance's token or position. Here a whole number is a JSON integer
(not a float, not a boolean, not text) in its range, and a token id one in the vocabulary; anything else refuses the
record, naming the file and the line. Deeply nested JSON (which Python's parser answers with a RecursionError) and
the non-standard NaN/Infinity literals are refused as not JSON.
"""

from __future__ import annotations

import json

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean

INT64_MAX = 2**63 - 1


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str | bytes, where: str, what: str = "a JSON record"):
    """``json.loads`` of the text, or a refusal saying ``where`` it is not ``what``."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise MemtuiError(f"{where}: not {what} (nested too deeply).") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        reason = clean(" ".join(str(exc).split()), 80)
        raise MemtuiError(f"{where}: not {what} ({reason}).") from None


def whole(value, where: str, field: str, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """A JSON integer in [minimum, maximum], or a refusal naming the field and the value."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MemtuiError(f"{where}: {field} must be a whole number, not {clean(json.dumps(value), 40)}.")
    if not minimum <= value <= maximum:
        raise MemtuiError(f"{where}: {field} {clean(value, 40)} lies outside {minimum} .. {maximum}.")
    return value


def token_ids(values, where: str, length: int, vocab: int | None) -> np.ndarray:
    """A list of ``length`` token ids, each a JSON integer in [0, vocab) (``vocab`` None: below 2**63), as int64."""
    if not isinstance(values, list) or len(values) != length:
        got = len(values) if isinstance(values, list) else "no list of"
        raise MemtuiError(f"{where}: expected 'token_ids' with {length} ids, found {got}.")
    top = INT64_MAX if vocab is None else vocab - 1
    if set(map(type, values)) == {int}:  # one pass in C; bool is a type of its own here
        try:
            ids = np.array(values, dtype=np.int64)
        except OverflowError:
            ids = None
        if ids is not None and (not len(ids) or (ids.min() >= 0 and ids.max() <= top)):
            return ids
    k, v = next((k, v) for k, v in enumerate(values) if type(v) is not int or not 0 <= v <= top)
    kind = "an integer outside" if type(v) is int else "not a token id in"
    raise MemtuiError(f"{where}: token {k} is {clean(json.dumps(v), 40)}, {kind} the vocabulary's range 0 .. {top}.")
