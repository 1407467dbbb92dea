"""Build a panel waiting for extraction: instances (token ids + treatment step) and the checkpoint steps.

Two sources:

- a Pythia-layout token memmap (rows of ``seq_len`` uint16 tokens in training order, ``batch_size`` rows per step),
  sampled like Lesci et al.: per macro-batch of ``macro`` steps, ``k`` batches x ``m`` rows (seeded), plus
  never-trained validation rows from a token-id file;
- any token-id array file (npy / npz / parquet) with a treatment-step column.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import refuse_existing
from memtui.core.paths import input_file
from memtui.core.text import clean
from memtui.extract.checkpoints import parse_checkpoints
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER, PAD

_TOKENS_DEFAULT = "tokens"  # build's --tokens-column default
PYTHIA_TOKENS, PYTHIA_INDEX = "input_ids", "seq_idx"  # the columns of the panel Lesci et al. released


def _check_out(out, overwrite: bool) -> None:
    refuse_existing(out, overwrite)


def _load(path: Path, **kw):
    """``np.load`` with its many failure modes (junk bytes, a pickled object array, a truncated zip) as one line."""
    try:
        return np.load(path, allow_pickle=False, **kw)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        reason = clean((str(exc).strip().splitlines() or [type(exc).__name__])[0], 120)
        if "allow_pickle" in reason or "Object arrays" in reason:
            reason = "it holds Python objects, not numbers"
        raise MemtuiError(f"{path}: cannot read it as a numpy array file ({reason}).") from None


def _token_ids(arr, path) -> np.ndarray:
    """A 2-D integer token matrix, or a one-line refusal."""
    arr = np.asarray(arr)
    if arr.ndim != 2:
        raise MemtuiError(f"{path}: expected a 2-D array of token ids, found shape {arr.shape}.")
    if arr.dtype.kind not in "iu":
        raise MemtuiError(f"{path}: token ids must be integers, found {arr.dtype}.")
    return arr


def check_token_range(tokens: np.ndarray, lengths: np.ndarray, path) -> None:
    """Token ids inside each row's length must be >= 0 and fit int32 (the vocabulary is checked when extracting)."""
    inside = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
    ids = tokens[inside]
    if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        bad = int(((ids < 0) | (ids > np.iinfo(np.int32).max)).sum())
        raise MemtuiError(
            f"{path}: {bad} token ids are negative or too large (smallest {int(ids.min())}, largest "
            f"{int(ids.max())}); token ids are vocabulary indices >= 0."
        )


def _lengths_from_padding(tokens: np.ndarray) -> np.ndarray:
    """Each row's length where none is given: trailing PAD (-1) entries are padding, as in the panel format."""
    real = tokens != PAD
    return np.where(real.any(axis=1), tokens.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def open_memmap(path: str | os.PathLike, seq_len: int) -> np.ndarray:
    """Rows x seq_len tokens, memory-mapped: a raw uint16 ``.bin`` (Pythia's layout) or an ``.npy``."""
    path = input_file(path, "token file")  # a folder, a FIFO or a device is refused, not read
    if path.suffix == ".npy":
        return _token_ids(_load(path, mmap_mode="r"), path)
    size = path.stat().st_size
    if size % (2 * seq_len):
        raise MemtuiError(
            f"{path}: {size} bytes is not a whole number of {seq_len}-token uint16 rows; check --seq-len."
        )
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(size // (2 * seq_len), seq_len))


def load_token_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """A 2-D token-id array from .npy / .npz (key ``tokens`` or the only array) / .bin (uint16, needs a reshape)."""
    path = input_file(path, "token file")
    if path.suffix == ".npz":
        z = _load(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            name = key or ("tokens" if "tokens" in z else (z.files[0] if len(z.files) == 1 else None))
            if name is None or name not in z:
                raise MemtuiError(f"{path}: no array named 'tokens' (it has {clean(', '.join(z.files), 200)}).")
            arr = _npz_member(z, name, path)
    else:
        arr = _load(path)
    return _token_ids(arr, path)


def _npz_member(z, name: str, path: Path) -> np.ndarray:
    try:
        return z[name]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        reason = "it holds Python objects" if "allow_pickle" in str(exc) else clean(type(exc).__name__)
        raise MemtuiError(f"{path}: cannot read array '{clean(name, 60)}' ({reason}).") from None


def sample_memmap_rows(
    n_rows: int, *, batch_size: int, macro: int, k: int, m: int, max_step: int, seed: int = 0
) -> np.ndarray:
    """Row indices: for every macro-batch whose treatment step is <= max_step, k batches x m rows, seeded."""
    rng = np.random.default_rng(seed)
    n_batches = n_rows // batch_size
    rows = []
    for j in range(n_batches // macro + 1):
        if (j + 1) * macro > max_step:
            break
        batches = np.arange(j * macro, min((j + 1) * macro, n_batches))
        if len(batches) == 0:
            break
        chosen = rng.choice(batches, size=min(k, len(batches)), replace=False)
        for b in np.sort(chosen):
            within = rng.choice(batch_size, size=min(m, batch_size), replace=False)
            rows.extend(b * batch_size + np.sort(within))
    return np.asarray(rows, dtype=np.int64)


def build_from_memmap(
    out: str | os.PathLike,
    memmap: str | os.PathLike,
    validation: str | os.PathLike,
    *,
    steps: str | Sequence[int] | None = None,
    batch_size: int = 1024,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_validation: int | None = None,
    seq_len: int = 2049,
    seed: int = 0,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel of sampled training rows (treatment per macro-batch) and never-trained validation rows."""
    _check_out(out, overwrite)
    data = open_memmap(memmap, seq_len)
    n_rows, length = data.shape
    covered = (n_rows // batch_size) // macro * macro  # last checkpoint whose macro-batch is complete in the file
    if steps is None:
        if covered == 0:
            raise MemtuiError(f"{memmap}: {n_rows} rows do not fill one macro-batch of {macro} x {batch_size} rows.")
        step_list = list(range(0, covered + 1, macro))
    else:
        step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted(set(int(s) for s in steps))
        if step_list is None:
            raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
    rows = sample_memmap_rows(n_rows, batch_size=batch_size, macro=macro, k=k, m=m, max_step=max(step_list), seed=seed)
    from memtui.panel.importing import pythia_treatment_step

    treat = pythia_treatment_step(rows, batch_size, macro)  # the rows are in training order
    keep = np.isin(treat, step_list)
    rows, treat = rows[keep], treat[keep]
    if len(rows) == 0:
        raise MemtuiError("no training rows fall into the panel's checkpoint steps; check --steps and --macro.")
    val, pick = _sampled_validation(validation, n_validation, seed)
    width = max(length, val.shape[1])
    tokens = np.full((len(rows) + len(val), width), PAD, dtype=np.int64)
    tokens[: len(rows), :length] = np.asarray(data[rows])
    check_token_range(tokens[: len(rows)], np.full(len(rows), length), memmap)
    tokens[len(rows) :, : val.shape[1]] = val
    lengths = np.r_[np.full(len(rows), length), np.full(len(val), val.shape[1])]
    ids = np.r_[rows, n_rows + pick]  # validation ids follow the memmap's rows
    return create_panel(
        out,
        ids=ids,
        treatment=np.r_[treat, np.full(len(val), NEVER)],
        steps=step_list,
        source_index=np.r_[rows, pick],
        tokens=tokens,
        lengths=lengths,
        attrs={
            "source": f"memmap {memmap} (batch {batch_size}, macro-batch {macro} steps, {k}x{m} per macro-batch, "
            f"seed {seed}); validation {validation}",
            **(attrs or {}),
        },
        overwrite=overwrite,
    )


def _sampled_validation(validation, n_validation: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The validation token rows (all, or ``n_validation`` drawn with seed + 1, in file order) and their row numbers."""
    val = load_token_array(validation)
    check_token_range(val, np.full(len(val), val.shape[1]), validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    return np.asarray(val[pick]), pick


def _read_table(path: Path, treatment_column: str, tokens_column: str):
    """(token lists, treatment steps, ids or None, source indices or None) of a parquet token table.

    Besides a treatment column, the layout of the panel Lesci et al. released is recognised: ``input_ids`` (2049 ids)
    and ``seq_idx`` (the training-order index, negative for validation rows), read when the named columns are absent;
    the treatment is then derived from ``seq_idx`` exactly as ``memtui import --from-seq-idx`` does.
    """
    import polars as pl

    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader error is a user-facing one-liner
        raise MemtuiError(f"{path}: cannot read parquet ({type(exc).__name__}).") from None
    if tokens_column not in df.columns and tokens_column == _TOKENS_DEFAULT and PYTHIA_TOKENS in df.columns:
        tokens_column = PYTHIA_TOKENS
    if treatment_column not in df.columns and PYTHIA_INDEX in df.columns:
        return _read_seq_idx_table(df, path, tokens_column)
    for col in (tokens_column, treatment_column):
        if col not in df.columns:
            raise MemtuiError(f"{path}: no column '{col}' (it has {', '.join(df.columns)}).")
    seqs = df[tokens_column].to_list()
    ids = df["id"].to_numpy() if "id" in df.columns else None
    return seqs, df[treatment_column].to_numpy(), ids, None


def _read_seq_idx_table(df, path: Path, tokens_column: str):
    from memtui.panel.importing import pythia_treatment_step

    if tokens_column not in df.columns:
        raise MemtuiError(
            f"{path}: no column '{clean(tokens_column, 60)}' (it has {clean(', '.join(df.columns), 200)})."
        )
    column = df[PYTHIA_INDEX]
    if not column.dtype.is_integer() or column.null_count():
        raise MemtuiError(
            f"{path}: column '{PYTHIA_INDEX}' must hold a whole training-order index in every row, not {column.dtype}"
            f"{' with missing values' if column.null_count() else ''}."
        )
    seq_idx = column.to_numpy().astype(np.int64)
    if len(np.unique(seq_idx)) != len(seq_idx):
        raise MemtuiError(f"{path}: some '{PYTHIA_INDEX}' values appear more than once; keep one row per sequence.")
    treat = pythia_treatment_step(seq_idx)
    return df[tokens_column].to_list(), treat, seq_idx, seq_idx


def build_from_tokens(
    out: str | os.PathLike,
    tokens_file: str | os.PathLike,
    *,
    steps: str | Sequence[int] | None = None,
    treatment_column: str = "treatment_step",
    tokens_column: str = "tokens",
    treatment_file: str | os.PathLike | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from token ids with a treatment step per row (-1 = never trained, a validation instance).

    .parquet: a list column of token ids and a treatment column (optional ``id``), or the released Pythia panel's
    ``input_ids`` and ``seq_idx`` (treatment from the training-order index, ids the ``seq_idx``); .npz: arrays
    ``tokens``, ``treatment_step`` (or the named column), optional ``lengths`` and ``id``; .npy: the token matrix,
    with the treatment steps in ``treatment_file`` (.npy). ``steps`` defaults to 0 and every treatment step.
    """
    _check_out(out, overwrite)
    path = input_file(tokens_file, "token file")
    tokens, treat, ids, lengths, source = _read_token_file(path, treatment_column, tokens_column, treatment_file)
    tokens, treat, lengths = _checked_token_rows(tokens, treat, lengths, path)
    check_token_range(tokens, lengths, path)
    if steps is None:
        step_list = sorted({0, *treat[treat >= 0].tolist()})
    else:
        step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted(set(int(s) for s in steps))
        if step_list is None:
            raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
    return create_panel(
        out,
        ids=np.arange(len(treat)) if ids is None else ids,
        treatment=treat,
        steps=step_list,
        source_index=np.arange(len(treat)) if source is None else source,
        tokens=tokens,
        lengths=lengths,
        attrs={"source": f"tokens {path}", **(attrs or {})},
        overwrite=overwrite,
    )


def _read_token_file(path: Path, treatment_column: str, tokens_column: str, treatment_file):
    """(tokens, treatment, ids, lengths, source rows) as stored in a .parquet, .npz or .npy (+ treatment file);
    ids, lengths and source are None where the file does not give them."""
    ids = lengths = source = None
    if path.suffix == ".parquet":
        seqs, treat, ids, source = _read_table(path, treatment_column, tokens_column)
        lengths = np.array([len(s) for s in seqs])
        tokens = np.full((len(seqs), max(lengths.max(), 1)), PAD, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
    elif path.suffix == ".npz":
        z = _load(path)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise MemtuiError(f"{path}: not an .npz archive.")
        with z:
            if tokens_column not in z or treatment_column not in z:
                raise MemtuiError(
                    f"{path}: needs arrays '{clean(tokens_column, 60)}' and '{clean(treatment_column, 60)}' "
                    f"(it has {clean(', '.join(z.files), 200)})."
                )
            tokens, treat = _npz_member(z, tokens_column, path), _npz_member(z, treatment_column, path)
            lengths = _npz_member(z, "lengths", path) if "lengths" in z else None
            ids = _npz_member(z, "id", path) if "id" in z else None
    elif path.suffix == ".npy":
        if treatment_file is None:
            raise MemtuiError(f"{path}: an .npy token matrix needs --treatment-file with one step per row.")
        tokens, treat = load_token_array(path), _load(input_file(treatment_file, "treatment file"))
    else:
        raise MemtuiError(f"{path}: unsupported token file; use .npy (+ --treatment-file), .npz or .parquet.")
    return tokens, treat, ids, lengths, source


def _checked_token_rows(tokens, treat, lengths, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, whole treatment steps (>= -1) one per row, and each row's length (from padding if not given)."""
    tokens = _token_ids(tokens, path)
    treat = np.asarray(treat)
    if treat.dtype.kind not in "iu" and not (treat.dtype.kind == "f" and np.all(np.mod(treat, 1) == 0)):
        raise MemtuiError(f"{path}: treatment steps must be whole numbers (-1 for never trained), found {treat.dtype}.")
    treat = treat.astype(np.int64).reshape(-1)
    if len(tokens) != len(treat):
        raise MemtuiError(f"{path}: {len(treat)} treatment steps for token array of shape {tokens.shape}.")
    if len(treat) == 0:
        raise MemtuiError(f"{path}: no rows.")
    if treat.min() < NEVER:
        raise MemtuiError(f"{path}: treatment steps must be >= 0, or -1 for never-trained instances.")
    lengths = _lengths_from_padding(tokens) if lengths is None else np.asarray(lengths).reshape(-1)
    if (
        len(lengths) != len(tokens)
        or lengths.dtype.kind not in "iu"
        or lengths.min() < 1
        or lengths.max() > tokens.shape[1]
    ):
        raise MemtuiError(f"{path}: 'lengths' must give each row's length, 1 .. {tokens.shape[1]}.")
    return tokens, treat, lengths


# -- panels from a family's data order (memtui.orders; docs/suites.md) ----------------------------------------------


def _order_steps(steps, macro: int, last: int | None, what: str) -> list[int]:
    """The panel's checkpoint steps: ``--steps`` as given, else every ``macro`` steps up to ``last``."""
    if steps is not None:
        step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted({int(s) for s in steps})
        if step_list is None:
            raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
        return step_list
    if last is None or last < macro:
        raise MemtuiError(f"{what}: give the panel's checkpoint steps (--steps).")
    return list(range(0, last + 1, macro))


def _check_outputs(outs: Sequence[Path], overwrite: bool) -> None:
    for out in outs:
        refuse_existing(out, overwrite)


def _write_order_panel(
    out: Path,
    *,
    ids,
    treatment,
    steps,
    tokens: np.ndarray,
    lengths,
    provenance: dict,
    provenance_attrs: dict | None = None,
    revisions=None,
    attrs: dict,
    overwrite: bool,
) -> Path:
    """The step every order shares: check the token ids, refuse a panel without controls, write it atomically."""
    treatment = np.asarray(treatment, dtype=np.int64)
    if not (treatment == NEVER).any():
        raise MemtuiError("the panel would have no never-trained controls; give --n-validation > 0 (and a source).")
    if not (treatment != NEVER).any():
        raise MemtuiError("no training instance falls into the panel's checkpoint steps; check --steps.")
    check_token_range(tokens, lengths, out)
    return create_panel(
        out,
        ids=ids,
        treatment=treatment,
        steps=steps,
        source_index=provenance.get("position"),
        tokens=tokens,
        lengths=lengths,
        revisions=revisions,
        attrs=attrs,
        provenance=provenance,
        provenance_attrs=provenance_attrs,
        overwrite=overwrite,
    )


def _stack_rows(rows: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Token rows of any lengths as a PAD-filled matrix and their lengths."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.full((len(rows), max(int(lengths.max()), 1)), PAD, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


def _validation_rows(validation, n_validation: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows picked, their tokens) of a never-trained validation token file (.npy / .npz, rows x length)."""
    if validation is None:
        raise MemtuiError("--controls validation needs --validation FILE (.npy, rows x length of never-trained ids).")
    val = load_token_array(validation)
    if n_validation is not None and n_validation < len(val):
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(val), size=n_validation, replace=False))
    else:
        pick = np.arange(len(val))
    return pick, np.asarray(val[pick]).astype(np.int64)


def _seed_name(prefix: str, k: int) -> str:
    """``seed{N}`` from a GPT-NeoX map prefix (``..._{N}s``), else by position."""
    import re

    found = re.search(r"_(\d+)s$", str(prefix))
    return f"seed{found.group(1)}" if found else f"seed{k}"


def build_from_neox(
    out: str | os.PathLike,
    tokens: str | os.PathLike,
    maps: str | os.PathLike,
    *,
    batch_size: int,
    seq_len: int | None = None,
    steps: str | Sequence[int] | None = None,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_controls: int | None = None,
    controls: str = "beyond",
    validation: str | os.PathLike | None = None,
    train_steps: int | None = None,
    seed: int = 0,
    seeds: Sequence[str] | None = None,
    seed_names: Sequence[str] | None = None,
    perturbation_info: str | os.PathLike | None = None,
    examples: str | os.PathLike | None = None,
    cache: str | os.PathLike | None = None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Panel(s) from a GPT-NeoX / Megatron order: ``k x m`` sequences per cohort drawn uniformly over the cohort's
    training positions, never-trained controls past the last trained step ("beyond") or from ``validation``.

    ``seq_len`` is the row length (tokens per instance, the maps' seq_len + 1). ``seeds``: the map prefixes of other
    seeds' orders of the same corpus (``maps`` is the home seed): one panel per seed over the same instances, each
    with that seed's treatment (``OUT-{seed}.h5``). ``perturbation_info``: Hubble's inserted examples are added, each
    treated at its first insertion, with its duplication count and insertion steps. Returns the panels written."""
    from memtui.orders.neox import IndexedTokens, IndexMaps, NeoxOrder, sample_panel_instances

    out = Path(out)
    names, outs = _neox_outputs(out, maps, controls, seeds, seed_names, overwrite)
    data = IndexedTokens(tokens, cache_dir=cache)
    order = NeoxOrder(data, IndexMaps(maps, cache_dir=cache), batch_size, None if seq_len is None else seq_len - 1)
    step_list = _order_steps(steps, macro, order.n_sequences // order.batch_size, str(maps))
    beyond = controls == "beyond"
    n_beyond = (1000 if n_controls is None else n_controls) if beyond else 0
    inst = sample_panel_instances(
        order,
        steps=step_list,
        per_cohort=k * m,
        n_controls=n_beyond,
        seed=seed,
        controls="beyond" if beyond else "none",
        train_steps=train_steps,
    )
    ids, treat, rows = inst.ids, inst.treatment, list(inst.tokens)
    first_piece = np.r_[0, np.flatnonzero(np.diff(inst.pieces.instance)) + 1]
    prov = {
        "position": ids,
        "step": inst.step,
        "document": inst.pieces.document[first_piece],  # the corpus document the sequence starts in
        "offset": inst.pieces.offset[first_piece],  # and the token it starts at
    }
    notes = [f"order {maps}: {order.n_sequences:,} sequences of {order.seq_len + 1} tokens, batch {batch_size}"]
    if perturbation_info is not None:
        ids, treat, rows, prov, note = _with_insertions(order, perturbation_info, examples, step_list, ids, treat,
                                                        rows, prov)  # fmt: skip
        notes.append(note)
    if not beyond:
        pick, val = _validation_rows(validation, n_controls, seed)
        ids = np.r_[ids, order.n_sequences + pick]  # validation ids follow the order's positions
        treat = np.r_[treat, np.full(len(pick), NEVER)]
        rows += list(val)
        prov = {key: _pad_rows(v, len(pick)) for key, v in prov.items()}
        notes.append(f"controls: {len(pick)} validation rows of {validation}")
    matrix, lengths = _stack_rows(rows)
    base = {"source": f"neox order {maps} over {tokens}", "order": "neox", "order_notes": "; ".join(notes),
            "batch_size": str(batch_size), **(attrs or {})}  # fmt: skip
    if not seeds:
        return [_write_order_panel(out, ids=ids, treatment=treat, steps=step_list, tokens=matrix, lengths=lengths,
                                   provenance=prov, attrs=base, overwrite=overwrite)]  # fmt: skip
    others = [NeoxOrder(data, IndexMaps(p, cache_dir=cache), batch_size, order.seq_len) for p in seeds]
    return _write_seed_suite(order, others, maps=maps, seeds=seeds, names=names, outs=outs, ids=ids, prov=prov,
                             step_list=step_list, matrix=matrix, lengths=lengths, base=base,
                             overwrite=overwrite)  # fmt: skip


def _neox_outputs(out: Path, maps, controls: str, seeds, seed_names, overwrite: bool) -> tuple[list[str], list[Path]]:
    """The panels' names (one per seed in a seed suite) and files, refused where the options do not fit together or a
    file exists."""
    if controls not in ("beyond", "validation"):
        raise MemtuiError(f"--controls must be beyond or validation for --order neox, not '{controls}'.")
    if seeds and controls == "beyond":
        raise MemtuiError(
            "a seed suite needs --controls validation: a sequence beyond the home seed's last step is trained under "
            "the other seeds' orders."
        )
    names = [*seed_names] if seed_names else [_seed_name(p, i) for i, p in enumerate([maps, *(seeds or [])])]
    if seeds and len(set(names)) != len(names):
        raise MemtuiError(f"seed names must differ: {', '.join(names)}.")
    outs = [out.with_name(f"{out.stem}-{name}{out.suffix or '.h5'}") for name in names] if seeds else [out]
    _check_outputs(outs, overwrite)
    return names, outs


def _write_seed_suite(
    order, others, *, maps, seeds, names, outs, ids, prov, step_list, matrix, lengths, base, overwrite
) -> list[Path]:
    """One panel per seed over the same instances, each with that seed's treatment steps; instances some seed
    trained only partly by the last checkpoint leave the suite. Written whole or not at all."""
    from memtui.orders.neox import cohort, seed_steps

    trained = prov["position"] >= 0
    # under every seed, the home seed included: when the instance's input tokens were first trained (any, all). In a
    # later epoch of the home order that is before the sequence's own step (its tokens were cut into other
    # sequences in an earlier epoch), so the home seed is measured as the others are
    first = np.full((len(ids), len(names)), -1, dtype=np.int64)
    full = first.copy()
    first[trained], full[trained] = seed_steps(order, prov["position"][trained], [order, *others])
    last = max(step_list)
    # an instance some of whose tokens a seed trained by the last checkpoint, but not all, is neither treated nor a
    # clean control under that seed: it leaves the whole suite (the suite needs the same instances in every panel)
    partial = ((first >= 1) & (first <= last) & ((full < 1) | (full > last))).any(axis=1)
    keep = ~partial
    treatments = [np.where(trained, cohort(full[:, s], step_list), NEVER)[keep] for s in range(len(names))]
    prov = {key: v[keep] for key, v in prov.items()} | {"seed_steps": full[keep], "seed_first_steps": first[keep]}
    suite = _suite_mark(maps, ids[keep])
    written: list[Path] = []
    try:
        for s, (name, path) in enumerate(zip(names, outs, strict=True)):
            seed_attrs = {**base, "seed": name, "seeds": ",".join(names), "seed_suite": suite,
                          "order_notes": base["order_notes"] + f"; {int(partial.sum())} instances partly trained "
                          "by the last checkpoint under some seed left out"}  # fmt: skip
            written.append(_write_order_panel(
                path, ids=ids[keep], treatment=treatments[s], steps=step_list, tokens=matrix[keep],
                lengths=lengths[keep], provenance=prov, attrs=seed_attrs, overwrite=overwrite,
                provenance_attrs={"seeds": ",".join(names), "seed_maps": " ".join(map(str, [maps, *seeds]))},
            ))  # fmt: skip
    except BaseException:
        for path in written:  # a suite is whole or absent
            path.unlink(missing_ok=True)
        raise
    return written


def _pad_rows(values: np.ndarray, n: int) -> np.ndarray:
    """``values`` followed by ``n`` rows of "unknown": -1, or empty text."""
    fill = "" if values.dtype.kind in "USO" else -1
    return np.concatenate([values, np.full((n, *values.shape[1:]), fill, dtype=values.dtype)])


def _suite_mark(maps, ids: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(str(maps).encode() + np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def _with_insertions(order, info, examples, step_list, ids, treat, rows, prov):
    """Hubble: every inserted example as an instance (treated at its first insertion, with its duplication count and
    every copy's step); sampled sequences at an insertion's position are replaced by it."""
    from memtui.orders.hubble import hubble_instances, read_perturbation_info

    records = read_perturbation_info(info)
    ins = hubble_instances(order, records, checkpoints=step_list, examples=examples)
    seen = ins.treatment != NEVER  # inserted after the last checkpoint: not a clean control (another distribution)
    copies = np.concatenate(ins.steps)
    clash = np.isin(ids, np.array([r.position for r in records], dtype=np.int64))  # sampled sequences holding a copy
    width = max(len(s) for s in ins.steps)
    steps_pad = np.full((len(ins.steps), width), -1, dtype=np.int64)
    for i, s in enumerate(ins.steps):
        steps_pad[i, : len(s)] = s
    keep_rows = [r for r, c in zip(rows, clash, strict=True) if not c]
    n_old = int((~clash).sum())
    new_prov = {key: _pad_rows(v[~clash], int(seen.sum())) for key, v in prov.items()}
    new_prov["position"][n_old:] = ins.first_position[seen]
    new_prov["step"][n_old:] = order.step(ins.first_position[seen])
    new_prov["duplicates"] = np.r_[np.zeros(n_old, dtype=np.int64), ins.duplicates[seen]]
    new_prov["insertion_steps"] = np.r_[np.full((n_old, width), -1, dtype=np.int64), steps_pad[seen]]
    new_prov["source"] = np.r_[np.full(n_old, ""), np.array(ins.files, dtype=object)[seen]].astype(str)
    note = (f"{int(seen.sum())} inserted examples ({len(copies)} copies); {int((~seen).sum())} first inserted after "
            f"the last checkpoint left out; {int(clash.sum())} sampled sequences holding a copy replaced")  # fmt: skip
    return (
        np.r_[ids[~clash], ins.first_position[seen]],
        np.r_[treat[~clash], ins.treatment[seen]],
        keep_rows + [t for t, s in zip(ins.tokens, seen, strict=True) if s],
        new_prov,
        note,
    )


def _sampled_panel(out: Path, sampled, *, order: str, source: str, attrs: dict | None, overwrite: bool) -> Path:
    """A panel from an OLMo / OLMo-core / Amber sample (memtui.orders.sampling.SampledOrder)."""
    files = [f for stage_files in sampled.files for f in stage_files]
    first_file = np.cumsum([0, *(len(f) for f in sampled.files)])[:-1]
    prov = {
        "position": sampled.position,
        "stage": sampled.stage,
        "file": first_file[sampled.stage] + sampled.file,
        "offset": sampled.offset,
        "stage_names": np.array(sampled.stage_names, dtype=object),
        "file_names": np.array(files, dtype=object),
    }
    if sampled.source is not None:
        prov["source"] = np.asarray(sampled.source).astype(str)
    if order in ("olmo", "olmo-core"):  # Dolma's per-document metadata (.csv.gz beside each token file), where present
        from memtui.orders.dolma import document_of

        prov |= document_of(files, prov["file"], np.asarray(sampled.offset)) or {}
    counts = ", ".join(f"{key} {value}" for key, value in sampled.counts.items())
    base = {"source": source, "order": order, "order_notes": "; ".join([*sampled.notes, counts])[:4000],
            **(attrs or {})}  # fmt: skip
    return _write_order_panel(
        out, ids=sampled.ids, treatment=sampled.treatment, steps=sampled.steps, tokens=sampled.tokens,
        lengths=np.full(len(sampled.ids), sampled.tokens.shape[1]), provenance=prov, revisions=sampled.revisions,
        attrs=base, overwrite=overwrite,
    )  # fmt: skip


def _olmo_controls(controls: str) -> str:
    if controls not in ("beyond", "validation"):
        raise MemtuiError(f"--controls must be beyond or validation, not '{controls}'.")
    return "held-out" if controls == "validation" else "beyond"


def _stage_attrs(stage, step_offset: int) -> dict[str, str]:
    """What extraction's revision presets read: tokens per step and the stage's first step (stage-2 names count
    steps within the stage)."""
    return {"tokens_per_step": str(stage.batch * stage.files.seq_len), "batch_size": str(stage.batch),
            "step_offset": str(int(step_offset))}  # fmt: skip


def _sample_stage(stage, steps, macro, k, m, n_controls, controls, seed, train_steps):
    from memtui.orders.sampling import sample_order

    if train_steps is not None:
        stage.last_step = int(train_steps) - stage.offset
    last = stage.offset + stage.steps_in_order(stage.files.n_instances)
    step_list = _order_steps(steps, macro, last, stage.name)
    if controls == "validation" and stage.heldout is None:
        raise MemtuiError("--controls validation needs --heldout FILES (never-trained token files of the same kind).")
    return sample_order([stage], step_list, k=k, m=m, n_controls=1000 if n_controls is None else n_controls,
                        controls=_olmo_controls(controls), seed=seed)  # fmt: skip


def _shuffle_cache(cache):
    """Where an OLMo order's swap partners are kept: ``cache``, else ``$MEMTUI_CACHE/shuffles`` where the user set
    it, else nowhere. Kept only when asked: 4 bytes an instance (1.2 GB for 3e8 instances) would otherwise land in
    the user's cache folder unannounced, to save seconds (a first build of 3e8 takes 8-16 s, a cached one 2-4 s)."""
    from memtui.orders.globalindices import default_cache

    if cache is not None:
        return cache
    return default_cache() if os.environ.get("MEMTUI_CACHE", "").strip() else None


def build_from_olmo(
    out: str | os.PathLike,
    config: str | os.PathLike,
    *,
    global_indices=None,
    data_root=None,
    heldout: Sequence[str] | None = None,
    stage_name: str | None = None,
    step_offset: int = 0,
    steps=None,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_controls: int | None = None,
    controls: str = "beyond",
    train_steps: int | None = None,
    seed: int = 0,
    cache=None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from an OLMo 1/2 training config (one stage: a stage-2 config with ``step_offset`` = stage 1's steps)."""
    from memtui.orders.olmo import olmo_stage

    _check_out(out, overwrite)
    prefix = f"{stage_name}-" if stage_name and stage_name.startswith("stage") else ""
    stage = olmo_stage(config, global_indices=global_indices, data_root=data_root, name=stage_name,
                       offset=step_offset, heldout=heldout, revision_prefix=prefix,
                       cache=_shuffle_cache(cache))  # fmt: skip
    sampled = _sample_stage(stage, steps, macro, k, m, n_controls, controls, seed, train_steps)
    extra = _stage_attrs(stage, step_offset)
    return _sampled_panel(Path(out), sampled, order="olmo", source=f"OLMo config {config}",
                          attrs={**extra, **(attrs or {})}, overwrite=overwrite)  # fmt: skip


def build_from_olmo_core(
    out: str | os.PathLike,
    config: str | os.PathLike,
    *,
    data_root=None,
    data_paths=None,
    epoch: int = 1,
    heldout: Sequence[str] | None = None,
    stage_name: str | None = None,
    step_offset: int = 0,
    steps=None,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_controls: int | None = None,
    controls: str = "beyond",
    train_steps: int | None = None,
    seed: int = 0,
    cache=None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from the ``config.json`` an OLMo-core run wrote (its ``dataset`` and ``data_loader`` sections)."""
    from memtui.orders.olmo import olmo_core_stage

    _check_out(out, overwrite)
    stage = olmo_core_stage(config, data_root=data_root, data_paths=data_paths, epoch=epoch, name=stage_name,
                            offset=step_offset, heldout=heldout, cache=_shuffle_cache(cache))  # fmt: skip
    sampled = _sample_stage(stage, steps, macro, k, m, n_controls, controls, seed, train_steps)
    extra = _stage_attrs(stage, step_offset)
    return _sampled_panel(Path(out), sampled, order="olmo-core", source=f"OLMo-core config {config}",
                          attrs={**extra, **(attrs or {})}, overwrite=overwrite)  # fmt: skip


def build_from_amber(
    out: str | os.PathLike,
    chunks: str,
    *,
    steps=None,
    k: int = 1,
    m: int = 50,
    n_controls: int | None = None,
    controls: str = "beyond",
    heldout: Sequence[str] | None = None,
    seq_len: int = 2049,
    seed: int = 0,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from LLM360 Amber's chunks (a folder, or a URL laid out as the hub dataset): cohort = chunk."""
    from memtui.orders.amber import N_CHUNKS, remote_chunks, sample_amber
    from memtui.orders.tokenfiles import is_url

    _check_out(out, overwrite)
    if steps is None:
        raise MemtuiError("--order amber: give the panel's checkpoints (--steps, chunk numbers 0..359).")
    step_list = _order_steps(steps, 1, None, "amber")
    found = remote_chunks(chunks, range(N_CHUNKS)) if is_url(chunks) else chunks
    sampled = sample_amber(found, step_list, k=k, m=m, n_controls=1000 if n_controls is None else n_controls,
                           controls=_olmo_controls(controls), heldout=heldout, seed=seed, seq_len=seq_len)  # fmt: skip
    return _sampled_panel(Path(out), sampled, order="amber", source=f"Amber chunks {chunks}", attrs=attrs,
                          overwrite=overwrite)  # fmt: skip
