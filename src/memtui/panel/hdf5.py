"""The panel file: instances x checkpoints x metrics in one HDF5 file (format in docs/panel-format.md).

Every dataset is created at its final shape when the panel is made; extraction then fills one checkpoint column at a
time, flushes, and only then flips that checkpoint's ``done`` flag. Files are written with the latest HDF5 format so
that a writer in SWMR mode and any number of readers can have the file open at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import h5py
import numpy as np

from memtui import __version__
from memtui.core.errors import MemtuiError
from memtui.core.files import atomic_write, refuse_existing
from memtui.core.text import clean
from memtui.panel import metrics as registry
from memtui.panel.model import EXTRACTABLE_DEFAULT, NEVER, Panel
from memtui.panel.names import MAX_COVARIATE_NAME, is_covariate_name
from memtui.panel.scoring import SCORING_BYTES
from memtui.panel.superblock import read_superblock

FORMAT_NAME = "memtui-panel"
FORMAT_VERSION = 1


def _checked_array(name: str, values, dtype, shape: tuple) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != shape:
        raise MemtuiError(f"{name} has shape {arr.shape}, expected {shape}.")
    return arr.astype(dtype, copy=False)


MAX_ATTR_BYTES = 8192  # attributes stay small enough to live in the (checksummed) object header


def text_attr(value: str) -> np.bytes_:
    """A text attribute as fixed-length UTF-8: h5py stores a ``str`` as a variable-length string in HDF5's global
    heap, which has no checksum (damaged, it can make HDF5 loop forever)."""
    return np.bytes_(value.encode("utf-8", "replace")[:MAX_ATTR_BYTES])


def _new_file(name: str = "panel.h5") -> h5py.File:
    """A new HDF5 file, in memory, laid out so that every byte HDF5 must parse is covered by a checksum.

    Files of the latest format checksum their metadata, except the heaps that hold "dense" attributes and
    variable-length strings; a damaged heap can make HDF5 loop forever. So attributes are kept compact (inside the
    checksummed object header) and strings fixed-length; raw data carries Fletcher-32 checksums (see ``_put``).
    The file is built in memory and saved with :func:`_save`: HDF5 itself never writes to a disk that can fill up
    (on ENOSPC it leaves objects that crash the interpreter when they are freed).
    """
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_fapl_core(1 << 20, False)
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_attr_phase_change(64, 48)
    fid = h5py.h5f.create(os.fsencode(name), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    return h5py.File(fid)


def _save(f: h5py.File, path: Path) -> None:
    """Write the in-memory file ``f`` to ``path`` with plain I/O (errors are ordinary OSErrors) and sync it."""
    f.flush()
    image = f.id.get_file_image()
    with open(path, "wb") as out:
        out.write(image)
        out.flush()
        os.fsync(out.fileno())


def _put(group: h5py.Group, name: str, data: np.ndarray, chunks: tuple | None = None) -> h5py.Dataset:
    """A dataset written whole at its final size, with a Fletcher-32 checksum per chunk: damaged data is refused on
    read instead of being estimated from. Rewriting a chunk in place (extraction) keeps its size, so the file never
    grows after it is made."""
    data = np.asarray(data)
    chunks = chunks or (data.shape if data.size else None)
    return group.create_dataset(name, data=data, chunks=chunks, fletcher32=chunks is not None)


def create_panel(
    path: str | os.PathLike,
    *,
    ids: Sequence[int],
    treatment: Sequence[int],
    steps: Sequence[int],
    metrics: Sequence[str] = registry.STANDARD,
    values: Mapping[str, np.ndarray] | None = None,
    split: Sequence[str] | None = None,
    source_index: Sequence[int] | None = None,
    tokens: np.ndarray | None = None,
    lengths: Sequence[int] | None = None,
    revisions: Sequence[str] | None = None,
    signs: Mapping[str, int] | None = None,
    attrs: Mapping[str, str] | None = None,
    truth: Mapping[str, np.ndarray] | None = None,
    extractable: tuple[int, int] = EXTRACTABLE_DEFAULT,
    overwrite: bool = False,
    provenance: Mapping[str, np.ndarray] | None = None,
    provenance_attrs: Mapping[str, str] | None = None,
    covariates: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """Write a new panel with every dataset at its final shape.

    ``values`` fills metric matrices now (import, simulation): checkpoints with any finite value are marked done.
    ``extractable`` is the (k, l) recorded on the extractability metrics' datasets (attributes ``k`` and ``l``).
    Without it the metrics are NaN and no checkpoint is done (a panel waiting for extraction).
    ``provenance``: where each instance came from in its data order (``instances/provenance``, see
    docs/panel-format.md): arrays whose first axis is the instances (integers or text), and lookup tables named
    ``*_names`` (text) that they index; ``provenance_attrs``: short texts kept on that group (e.g. the seeds).
    Written to a temporary name and renamed, so a crash never leaves a half-made panel under ``path``.
    """
    path = Path(path)
    refuse_existing(path, overwrite)
    ids = _checked_ids(ids)
    n = len(ids)
    treatment = _checked_array("treatment", treatment, np.int64, (n,))
    steps = _checked_steps(steps)
    t = len(steps)
    values = dict(values or {})
    metrics = _checked_metric_names([*metrics, *values])
    _check_extractable(extractable)
    split = np.where(treatment == NEVER, "validation", "train") if split is None else split
    split = _checked_array("split", split, object, (n,))
    source_index = np.full(n, -1) if source_index is None else source_index
    source_index = _checked_array("source_index", source_index, np.int64, (n,))
    revisions = [f"step{s}" for s in steps] if revisions is None else list(revisions)
    if len(revisions) != t:
        raise MemtuiError(f"{len(revisions)} revisions for {t} checkpoints.")
    done = _checked_values(values, n, t)
    if tokens is not None:
        tokens, lengths = _checked_tokens(tokens, lengths, n)
    provenance = _checked_provenance(provenance or {}, n)
    covariates = checked_covariates(covariates or {}, n)
    root_attrs = _root_attrs(attrs)

    def write(tmp: Path) -> None:
        with _new_file(tmp.name) as f:
            for key, value in root_attrs.items():
                f.attrs[key] = text_attr(value) if isinstance(value, str) else value
            inst = f.create_group("instances")
            _put(inst, "id", ids)
            _put(inst, "treatment_step", treatment)
            _put(inst, "split", np.array([str(v).encode() for v in split], dtype="S"))
            _put(inst, "source_index", source_index)
            if tokens is not None:
                _put(inst, "tokens", tokens, chunks=(1, tokens.shape[1]))
                _put(inst, "length", lengths)
            if provenance:
                _write_provenance(inst, provenance, provenance_attrs)
            if covariates:
                write_covariates_group(inst, covariates)
            _write_checkpoints(f, steps, done, revisions)
            _write_metrics(f, metrics, values, signs, extractable, n, t)
            if truth:
                tg = f.create_group("truth")
                for key, arr in truth.items():
                    _put(tg, key, np.asarray(arr))
            _save(f, tmp)

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, write)
    return path


def _checked_ids(ids: Sequence[int]) -> np.ndarray:
    """Instance ids as int64: at least one, none repeated."""
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        raise MemtuiError("a panel needs at least one instance.")
    if len(np.unique(ids)) != len(ids):
        raise MemtuiError("instance ids must be unique.")
    return ids


def _checked_steps(steps: Sequence[int]) -> np.ndarray:
    """Checkpoint steps as int64, non-empty and strictly increasing."""
    steps = np.asarray(steps, dtype=np.int64)
    if len(steps) == 0 or np.any(np.diff(steps) <= 0):
        raise MemtuiError("checkpoint steps must be a non-empty, strictly increasing list.")
    return steps


def _checked_metric_names(names: Sequence[str]) -> list[str]:
    """The metric names, first occurrence kept, each usable as a dataset name."""
    metrics = list(dict.fromkeys(names))
    for name in metrics:  # a "/" would make a group of it (a panel every reader then refuses)
        if not isinstance(name, str) or not name or "/" in name or name != clean(name, None) or name in (".", ".."):
            raise MemtuiError(
                f"metric name '{clean(name, 60)}' is not allowed: it must be non-empty text without '/' or control "
                "characters."
            )
    return metrics


def _check_extractable(extractable: tuple[int, int]) -> None:
    if not (len(extractable) == 2 and all(isinstance(v, int | np.integer) and v >= 1 for v in extractable)):
        raise MemtuiError(f"extractable (k, l) must be two whole numbers >= 1, not {extractable!r}.")


def _checked_values(values: dict[str, np.ndarray], n: int, t: int) -> np.ndarray:
    """Check (in place) each given metric matrix is n x t float64; returns which checkpoints have any finite value."""
    done = np.zeros(t, dtype=bool)
    for name, arr in values.items():
        values[name] = _checked_array(f"metric '{name}'", arr, np.float64, (n, t))
        done |= np.isfinite(values[name]).any(axis=0)
    return done


def _checked_tokens(tokens: np.ndarray, lengths: Sequence[int] | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Token matrix (n x sequence length) as int32 and the per-instance lengths (default: the full width)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[0] != n:
        raise MemtuiError(f"tokens have shape {tokens.shape}, expected ({n}, sequence length).")
    tokens = tokens.astype(np.int32)
    lengths = np.full(n, tokens.shape[1]) if lengths is None else lengths
    return tokens, _checked_array("lengths", lengths, np.int32, (n,))


def _root_attrs(attrs: Mapping[str, str] | None) -> dict:
    """The file's top-level attributes: format, versions, when and how it was made, and the caller's extras."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "memtui_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(sys.argv),
        "model": "",
        **{k: str(v) for k, v in (attrs or {}).items()},
    }


def _write_provenance(inst: h5py.Group, provenance: dict[str, np.ndarray], attrs: Mapping[str, str] | None) -> None:
    prov = inst.create_group("provenance")
    for key, value in (attrs or {}).items():
        prov.attrs[str(key)] = text_attr(str(value))
    for key, arr in provenance.items():
        _put(prov, key, arr)


AVERAGE_BYTES = 40  # a weight average's kind is a short name (ema, soup, merged; orders/manifests.py: 40 at most)


def _write_checkpoints(f: h5py.File, steps: np.ndarray, done: np.ndarray, revisions: list[str]) -> None:
    t = len(steps)
    ck = f.create_group("checkpoints")
    _put(ck, "step", steps)
    _put(ck, "done", done.astype(np.uint8))
    _put(ck, "revision", np.array(revisions, dtype="S256"))
    _put(ck, "weights_hash", np.zeros(t, dtype="S64"))
    # written by extraction with each column: preallocated, so recording provenance never grows the file
    _put(ck, "model", np.zeros(t, dtype="S256"))
    _put(ck, "parameters", np.zeros(t, dtype=np.int64))  # 0: not recorded
    _put(ck, "config", np.zeros(t, dtype="S256"))
    _put(ck, "average", np.zeros(t, dtype=f"S{AVERAGE_BYTES}"))  # "": one model's training state (or not recorded)
    _put(ck, "scoring", np.zeros(t, dtype=f"S{SCORING_BYTES}"))  # device, dtype, scorer path ("": not recorded)
    _put(ck, "finished_at", np.zeros(t, dtype=np.float64))


def _write_metrics(
    f: h5py.File,
    metrics: list[str],
    values: dict[str, np.ndarray],
    signs: Mapping[str, int] | None,
    extractable: tuple[int, int],
    n: int,
    t: int,
) -> None:
    """One n x t float64 dataset per metric (NaN where not given), chunked by checkpoint column for extraction."""
    grp = f.create_group("metrics")
    for name in metrics:
        data = values.get(name, np.full((n, t), np.nan))
        ds = _put(grp, name, np.asarray(data, dtype=np.float64), chunks=(n, 1))
        ds.attrs["sign"] = int((signs or {}).get(name, registry.sign(name)))
        if name in registry.EXTRACTABILITY:  # fixed-size ints: two more compact attributes in the header
            ds.attrs["k"], ds.attrs["l"] = np.int64(extractable[0]), np.int64(extractable[1])
        if name == "sampled_logp":  # its sampling scheme, for whoever reads the file
            ds.attrs["top_k"] = np.int64(registry.SAMPLING_TOP_K)
            ds.attrs["temperature"] = np.float64(registry.SAMPLING_TEMPERATURE)


PROVENANCE_TABLE = "_names"  # provenance datasets ending so are lookup tables, not one row per instance


def _checked_provenance(provenance: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Per-instance provenance arrays (first axis n) as int64 or fixed-length UTF-8, and ``*_names`` tables."""
    out = {}
    for key, values in provenance.items():
        if not isinstance(key, str) or not key.replace("_", "").isalnum() or not key.isascii():
            raise MemtuiError(f"provenance name '{clean(key, 60)}' must be letters, digits and '_'.")
        arr = np.asarray(values)
        if arr.dtype.kind in "USO":
            arr = np.array([str(v).encode("utf-8", "replace") for v in arr.ravel()], dtype="S").reshape(arr.shape)
            if arr.dtype.itemsize == 0:
                arr = arr.astype("S1")
        elif arr.dtype.kind in "iub":
            arr = arr.astype(np.int64)
        else:
            raise MemtuiError(f"provenance '{key}' holds {arr.dtype}; it must be whole numbers or text.")
        if key.endswith(PROVENANCE_TABLE):
            if arr.ndim != 1 or arr.dtype.kind != "S":
                raise MemtuiError(f"provenance table '{key}' must be a list of names.")
        elif arr.ndim not in (1, 2) or arr.shape[0] != n:
            raise MemtuiError(f"provenance '{key}' has shape {arr.shape}; its first axis must be the {n} instances.")
        out[key] = arr
    return out


def _read_provenance(f: h5py.File, path: Path, n: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``instances/provenance`` checked as every dataset is (links, kinds, shapes); empty for panels without it."""
    name = "instances/provenance"
    if name not in f:
        return {}, {}
    if not isinstance(f.get(name, getlink=True), h5py.HardLink) or not isinstance(f[name], h5py.Group):
        raise MemtuiError(f"{path}: '{name}' is not a group; rebuild the panel.")
    out = {}
    for key in f[name]:
        ds = _dataset_handle(f, path, f"{name}/{key}", "iuS", label=f"provenance '{clean(key, 40)}'")
        if not key.endswith(PROVENANCE_TABLE) and (ds.ndim not in (1, 2) or ds.shape[0] != n):
            raise MemtuiError(f"{path}: provenance '{clean(key, 40)}' has shape {ds.shape}, not one row per instance.")
        values = ds[()]
        out[key] = (
            np.array(_strings(values.ravel(), path, key), dtype=object).reshape(values.shape)
            if values.dtype.kind == "S"
            else values.astype(np.int64)
        )
    return out, {k: _attr_text(v) for k, v in f[name].attrs.items()}


COVARIATES = "instances/covariates"


def checked_covariates(columns: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Per-instance covariates as stored: numbers (integers, flags, floats) as float64 with NaN = unknown, text as
    fixed-length UTF-8 (empty = unknown). Names are letters, digits and '_' (they are dataset names, and a ``--by``
    expression such as ``duplicates>=2`` must be able to name them); each is one value per instance."""
    out = {}
    for name, values in columns.items():
        if not _covariate_name_ok(name):
            raise MemtuiError(
                f"covariate name '{clean(name, 60)}' must be 1 to {MAX_COVARIATE_NAME} letters, digits and '_'."
            )
        arr = np.asarray(values)
        if arr.shape != (n,):
            raise MemtuiError(
                f"covariate '{name}' has shape {arr.shape}; it must hold one value for each of {n} instances."
            )
        out[name] = _covariate_column(name, arr)
    return out


def _covariate_name_ok(name) -> bool:
    return is_covariate_name(name)  # the one rule (panel/names.py): tables, --covariates, --cluster, --by


def _covariate_column(name: str, arr: np.ndarray) -> np.ndarray:
    """One covariate as stored: float64 (finite or NaN) or fixed-length UTF-8 bytes."""
    if arr.dtype.kind == "O" and all(isinstance(v, str | bytes) for v in arr):
        arr = arr.astype(str)
    elif arr.dtype.kind == "O":  # numbers with None for unknown, as a table reader may give them
        try:
            arr = np.array([np.nan if v is None else float(v) for v in arr], dtype=np.float64)
        except (TypeError, ValueError):
            raise MemtuiError(f"covariate '{name}' mixes numbers and text; give one kind per covariate.") from None
    if arr.dtype.kind in "US":
        text = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr]
        out = np.array([v.encode("utf-8") for v in text], dtype="S")
        return out if out.dtype.itemsize else out.astype("S1")
    if arr.dtype.kind not in "biuf":
        raise MemtuiError(f"covariate '{name}' holds {arr.dtype}; it must be numbers or text.")
    out = arr.astype(np.float64)
    if np.isinf(out).any():
        raise MemtuiError(f"covariate '{name}' holds infinite values; store unknown values as NaN.")
    return out


def write_covariates_group(inst: h5py.Group, covariates: Mapping[str, np.ndarray]) -> None:
    """``instances/covariates/NAME`` for each checked covariate (replacing one of that name already there)."""
    # past 8 links HDF5 keeps a group's links in a fractal heap and a v2 B-tree; both checksum every block for links
    # (HDF5's H5Gdense.c creates that heap with checksummed direct blocks), so many covariates stay covered
    group = inst.require_group("covariates")
    for name, arr in covariates.items():
        if name in group:
            del group[name]
        _put(group, name, arr)


def read_covariates_group(f: h5py.File, path: Path, n: int) -> dict[str, np.ndarray]:
    """``instances/covariates`` checked as every dataset is (links, kinds, shapes, names): float64 for numbers,
    object arrays of str for text; empty for panels without the group."""
    if COVARIATES not in f:
        return {}
    if not isinstance(f.get(COVARIATES, getlink=True), h5py.HardLink) or not isinstance(f[COVARIATES], h5py.Group):
        raise MemtuiError(f"{path}: '{COVARIATES}' is not a group; rewrite it with `memtui covariates --replace`.")
    out = {}
    for name in f[COVARIATES]:
        shown = clean(name, 40)
        if not _covariate_name_ok(name):
            raise MemtuiError(f"{path}: covariate '{shown}' has a name that is not letters, digits and '_'.")
        values = _dataset(f, path, f"{COVARIATES}/{name}", "fS", (n,), label=f"covariate '{shown}'")
        out[name] = (
            np.array(_strings(values, path, name), dtype=object)
            if values.dtype.kind == "S"
            else values.astype(np.float64)
        )
    return out


def _check_file(path: Path) -> None:
    """One-line refusals for what is not a whole panel file, before HDF5 touches it (it can hang on a cut file)."""
    if not path.exists():
        raise MemtuiError(
            f"{path}: no such file; make one with `memtui sample synthetic {path}` or `memtui import TABLE {path}`."
        )
    if path.is_dir():
        raise MemtuiError(f"{path} is a folder, not a panel file; pass the .h5 file inside it.")
    if not path.is_file():  # a pipe would block the read forever, a device could stream without end
        raise MemtuiError(f"{path} is not a regular file (a pipe, socket or device?); pass a panel file.")
    try:
        sb = read_superblock(path)
        is_hdf5 = sb is not None or h5py.is_hdf5(path)
        size = path.stat().st_size
    except OSError as exc:
        raise MemtuiError(f"{path} cannot be read ({exc.strerror or exc}).") from None
    if not is_hdf5:
        raise MemtuiError(
            f"{path} is not an HDF5 panel file (empty, truncated or another format); "
            "rebuild it with `memtui import` or `memtui sample`."
        )
    if sb is not None and not sb.checksum_ok:
        raise MemtuiError(f"{path} is damaged (its HDF5 superblock fails its checksum); copy it again or rebuild it.")
    if sb is not None and size < sb.needed_size:
        raise MemtuiError(
            f"{path} is truncated: {size:,} of its {sb.needed_size:,} bytes are there (an interrupted copy or "
            "download?); copy it again."
        )


def _open(path: Path) -> h5py.File:
    """Open a panel for reading: in SWMR mode only while a writer has it open, otherwise a plain open, which keeps
    HDF5's own end-of-file checks. Never takes HDF5's file lock (it fails on NFS and Lustre)."""
    _check_file(path)
    writing = _being_written(path)
    attempts = (True, False) if writing else (False, True)  # a writer may start or stop between the check and open
    reason = "unreadable"
    for swmr in attempts:
        try:
            return h5py.File(path, "r", libver="latest", swmr=swmr, locking=False)
        except OSError as exc:
            reason = str(exc).split("(")[0].strip() or reason
    raise MemtuiError(
        f"{path} cannot be opened ({clean(reason, 120)}); it may be corrupt or half-written: "
        "copy it again or rebuild it."
    )


def _dataset(
    f: h5py.File, path: Path, name: str, kinds: str, shape: tuple | None = None, *, optional: bool = False, label=None
):
    """The dataset ``name`` read whole, checked to be a dataset of one of the numpy dtype ``kinds`` and of ``shape``.

    Every check is a one-line refusal: a hand-edited or damaged file must never reach the estimator in a form the
    code did not expect (a group where a dataset belongs, ints stored where strings belong, a wrong length).
    """
    if name not in f:
        if optional:
            return None
        raise MemtuiError(f"{path}: dataset '{name}' is missing; the file is incomplete, rebuild it.")
    return _dataset_handle(f, path, name, kinds, shape, label=label)[()]


def _dataset_handle(f: h5py.File, path: Path, name: str, kinds: str, shape: tuple | None = None, *, label=None):
    """The checked dataset object itself (for reading a part of it)."""
    if name not in f:
        raise MemtuiError(f"{path}: dataset '{name}' is missing; the file is incomplete, rebuild it.")
    for depth in range(1, name.count("/") + 2):  # every link on the way must be a plain (hard) link
        part = "/".join(name.split("/")[:depth])
        if not isinstance(f.get(part, getlink=True), h5py.HardLink):
            raise MemtuiError(
                f"{path}: '{clean(part, 80)}' is a link to somewhere else (soft or external); a panel holds its data "
                "itself: rebuild it."
            )
    obj = f.get(name, getlink=False)
    if not isinstance(obj, h5py.Dataset):
        found = type(obj).__name__.lower()
        raise MemtuiError(f"{path}: {clean(name, 80)} is not a dataset (found a {found}); rebuild the panel.")
    label = label or f"'{name}'"
    if obj.dtype.kind not in kinds:
        want = {"iu": "integers", "f": "floating point", "S": "strings", "SO": "strings", "iub": "flags"}.get(kinds)
        want = "numbers or strings" if kinds == "fS" else want
        raise MemtuiError(f"{path}: {label} is stored as {obj.dtype}, expected {want or kinds}; rebuild the panel.")
    if shape is not None and obj.shape != shape:
        raise MemtuiError(f"{path}: {label} has shape {obj.shape}, expected {shape}; the file is inconsistent.")
    return obj


def _strings(values, path: Path, name: str) -> list[str]:
    out = []
    for v in values:
        if not isinstance(v, bytes | str):
            raise MemtuiError(f"{path}: '{name}' holds {type(v).__name__} values, expected strings; rebuild it.")
        out.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
    return out


def _attr_text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype.kind == "S":
        return " ".join(v.decode("utf-8", "replace") for v in value.ravel())
    return str(value)


def read_panel(path: str | os.PathLike) -> Panel:
    """Open and validate a panel; any problem is a MemtuiError with a one-line message."""
    path = Path(path)
    return _read_live(path, lambda f: _read(f, path))


_LIVE_READ_ATTEMPTS = 5


def _being_written(path: Path) -> bool:
    try:
        sb = read_superblock(path)
    except OSError:
        return False
    return sb is not None and sb.open_for_write


def _check_format(f: h5py.File, path: Path) -> None:
    """Refuse an HDF5 file that is not a memtui panel, or one of another format version."""
    if _attr_text(f.attrs.get("format", "")) != FORMAT_NAME:
        raise MemtuiError(f"{path} is an HDF5 file but not a memtui panel; convert it with `memtui import`.")
    try:
        version = int(f.attrs.get("format_version", -1))
    except (TypeError, ValueError):
        version = -1
    if version != FORMAT_VERSION:
        raise MemtuiError(
            f"{path} has panel format version {version}, this memtui reads version {FORMAT_VERSION}; "
            "use a matching memtui or rebuild the panel."
        )


def _check_treatment(treatment: np.ndarray, path: Path) -> None:
    """A panel needs never-treated controls, and no treatment step below NEVER."""
    if not (treatment == NEVER).any():
        raise MemtuiError(
            f"{path}: no never-treated (validation) instances, so there is no control group; "
            "add validation instances (treatment step -1)."
        )
    if (treatment < NEVER).any():
        raise MemtuiError(
            f"{path}: {int((treatment < NEVER).sum())} treatment steps are below -1 (-1 means never treated); "
            "rebuild the panel."
        )


def _read_metrics(f: h5py.File, path: Path, n: int, t: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Every metric matrix (n x t, as float64) and its sign (+1 or -1); a panel without metrics is refused."""
    group = f.get("metrics", getlink=False) if isinstance(f.get("metrics", getlink=True), h5py.HardLink) else None
    if not isinstance(group, h5py.Group) or not len(group):
        raise MemtuiError(f"{path}: the panel has no metrics; rebuild it with `memtui import` or `memtui sample`.")
    metrics, signs = {}, {}
    for name in group:
        shown = clean(name, 60)
        values = _dataset(f, path, f"metrics/{name}", "f", (n, t), label=f"metric '{shown}'")
        metrics[name] = values.astype(np.float64, copy=False)
        try:
            sign = int(group[name].attrs.get("sign", registry.sign(name)))
        except (TypeError, ValueError):
            sign = 0
        if sign not in (1, -1):
            raise MemtuiError(f"{path}: metric '{shown}' has sign attribute other than +1 or -1; rebuild the panel.")
        signs[name] = sign
    return metrics, signs


def _read(f: h5py.File, path: Path) -> Panel:
    _check_format(f, path)
    ids = _dataset(f, path, "instances/id", "iu")
    if ids.ndim != 1 or len(ids) == 0:
        raise MemtuiError(f"{path}: 'instances/id' must list at least one instance; rebuild the panel.")
    n = len(ids)
    treatment = _dataset(f, path, "instances/treatment_step", "iu", (n,))
    steps = _dataset(f, path, "checkpoints/step", "iu")
    if steps.ndim != 1:
        raise MemtuiError(f"{path}: 'checkpoints/step' has shape {steps.shape}, expected a list of steps.")
    t = len(steps)
    done = _dataset(f, path, "checkpoints/done", "iub", (t,))
    if t == 0 or np.any(np.diff(steps.astype(np.int64)) <= 0):
        raise MemtuiError(f"{path}: checkpoint steps are not strictly increasing; rebuild the panel.")
    _check_treatment(treatment, path)
    metrics, signs = _read_metrics(f, path, n, t)
    split = _dataset(f, path, "instances/split", "SO", (n,), optional=True)
    source = _dataset(f, path, "instances/source_index", "iu", (n,), optional=True)
    revisions = _dataset(f, path, "checkpoints/revision", "SO", (t,), optional=True)
    hashes = _dataset(f, path, "checkpoints/weights_hash", "SO", (t,), optional=True)
    models = _dataset(f, path, "checkpoints/model", "SO", (t,), optional=True)
    parameters = _dataset(f, path, "checkpoints/parameters", "iu", (t,), optional=True)
    configs = _dataset(f, path, "checkpoints/config", "SO", (t,), optional=True)
    averages = _dataset(f, path, "checkpoints/average", "SO", (t,), optional=True)  # panels before it: none recorded
    scorings = _dataset(f, path, "checkpoints/scoring", "SO", (t,), optional=True)  # likewise
    truth = None
    if "truth" in f and isinstance(f.get("truth", getlink=True), h5py.HardLink) and isinstance(f["truth"], h5py.Group):
        truth = {k: _dataset(f, path, f"truth/{k}", "iuf") for k in f["truth"]}
    attrs = {k: _attr_text(v) for k, v in f.attrs.items()}
    provenance, provenance_attrs = _read_provenance(f, path, n)
    covariates = read_covariates_group(f, path, n)
    models = _strings(models, path, "checkpoints/model") if models is not None else []
    if not attrs.get("model") and any(models):
        attrs["model"] = ", ".join(dict.fromkeys(m for m in models if m))  # who scored the checkpoints
    return Panel(
        ids=ids.astype(np.int64),
        treatment=treatment.astype(np.int64),
        steps=steps.astype(np.int64),
        done=done.astype(bool),
        metrics=metrics,
        split=np.array(_strings(split, path, "instances/split"), dtype=object) if split is not None else None,
        source_index=source,
        revisions=_strings(revisions, path, "checkpoints/revision") if revisions is not None else [],
        weight_hashes=_strings(hashes, path, "checkpoints/weights_hash") if hashes is not None else [],
        models=models,
        parameters=parameters.astype(np.int64) if parameters is not None else None,
        configs=_strings(configs, path, "checkpoints/config") if configs is not None else [],
        averages=_strings(averages, path, "checkpoints/average") if averages is not None else [],
        scorings=_strings(scorings, path, "checkpoints/scoring") if scorings is not None else [],
        signs=signs,
        attrs=attrs,
        truth=truth,
        path=path,
        has_tokens="instances/tokens" in f,
        lengths=_dataset(f, path, "instances/length", "iu", (n,), optional=True),
        extractable_kl=_lenient(_extractable_kl, f, path),
        provenance=provenance,
        provenance_attrs=provenance_attrs,
        covariates=covariates,
    )


def _lenient(read, f: h5py.File, path: Path):
    """``read(f, path)``, or None where the panel records it badly: a reader that only explains (why an extractability
    metric is empty) never makes the whole panel unreadable; read_extractable, for extraction, refuses instead."""
    try:
        return read(f, path)
    except MemtuiError:
        return None


def _read_live(path: Path, read):
    """``read(f)`` on the open panel, retried while a writer has it open (a chunk caught mid-write fails its
    checksum), with the one-line refusals of :func:`read_panel`."""
    for attempt in range(_LIVE_READ_ATTEMPTS):
        try:
            with _open(path) as f:
                return read(f)
        except MemtuiError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes h5py raise is a one-line refusal
            if attempt + 1 < _LIVE_READ_ATTEMPTS and _being_written(path):
                time.sleep(0.05 * (attempt + 1))
                continue
            reason = clean((str(exc).strip().splitlines() or [type(exc).__name__])[0], 160)
            raise MemtuiError(
                f"{path} cannot be read ({reason}); it may be corrupt or half-written: rebuild it or copy it again."
            ) from None
    raise AssertionError("unreachable")


def read_done(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint steps and their done flags, without reading the metrics (cheap enough to poll)."""
    path = Path(path)

    def read(f):
        steps = _dataset(f, path, "checkpoints/step", "iu").astype(np.int64)
        done = _dataset(f, path, "checkpoints/done", "iub", steps.shape).astype(bool)
        return steps, done

    return _read_live(path, read)


def read_scorings(path: str | os.PathLike) -> tuple[list[str], np.ndarray]:
    """How each checkpoint was scored (``checkpoints/scoring``; [] for a panel made before it) and the done flags,
    without reading the metrics."""
    path = Path(path)

    def read(f):
        steps = _dataset(f, path, "checkpoints/step", "iu")
        done = _dataset(f, path, "checkpoints/done", "iub", steps.shape).astype(bool)
        ways = _dataset(f, path, "checkpoints/scoring", "SO", steps.shape, optional=True)
        return (_strings(ways, path, "checkpoints/scoring") if ways is not None else []), done

    return _read_live(path, read)


def read_extractable(path: str | os.PathLike) -> tuple[int, int] | None:
    """The (k, l) a panel's extractability metrics are defined with (their datasets' ``k`` and ``l``), or None when it
    has neither metric. Both datasets must carry the same whole numbers >= 1."""
    path = Path(path)
    return _read_live(path, lambda f: _extractable_kl(f, path))


def _extractable_kl(f: h5py.File, path: Path) -> tuple[int, int] | None:
    """The (k, l) recorded on the extractability metrics' datasets; None without either metric."""
    found = set()
    for name in registry.EXTRACTABILITY:
        if f"metrics/{name}" not in f:
            continue
        attrs = _dataset_handle(f, path, f"metrics/{name}", "f").attrs
        try:
            found.add((int(attrs["k"]), int(attrs["l"])))
        except (KeyError, TypeError, ValueError):
            raise MemtuiError(
                f"{path}: metric '{name}' does not record its k and l (attributes); rebuild the panel."
            ) from None
    if len(found) > 1 or any(k < 1 or ell < 1 for k, ell in found):
        raise MemtuiError(f"{path}: the extractability metrics record inconsistent k and l; rebuild the panel.")
    return found.pop() if found else None


def read_shape(path: str | os.PathLike) -> tuple[int, int]:
    """(instances, checkpoints) of a panel, without reading its data."""
    path = Path(path)

    def read(f):
        return len(_dataset_handle(f, path, "instances/id", "iu")), len(
            _dataset_handle(f, path, "checkpoints/step", "iu")
        )

    return _read_live(path, read)


def read_lengths(path: str | os.PathLike) -> np.ndarray | None:
    """Each instance's row length (tokens), without reading the token ids; None for a panel that stores none."""
    path = Path(path)

    def read(f):
        if "instances/length" not in f:
            return None
        n = len(_dataset_handle(f, path, "instances/id", "iu"))
        return _dataset(f, path, "instances/length", "iu", (n,))

    return _read_live(path, read)


def read_tokens(path: str | os.PathLike, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (rows x L, PAD after each row's length) and lengths, for extraction."""
    path = Path(path)
    with _open(path) as f:
        if "instances/tokens" not in f:
            raise MemtuiError(
                f"{path}: the panel stores no token ids, so it cannot be extracted; build it with `memtui build`."
            )
        n = len(_dataset(f, path, "instances/id", "iu"))
        tokens = _dataset_handle(f, path, "instances/tokens", "iu")
        lengths = _dataset(f, path, "instances/length", "iu", (n,))
        if tokens.ndim != 2 or tokens.shape[0] != n:
            raise MemtuiError(f"{path}: 'instances/tokens' has shape {tokens.shape}, expected ({n}, length).")
        if len(lengths) and (lengths.min() < 0 or lengths.max() > tokens.shape[1]):
            raise MemtuiError(f"{path}: 'instances/length' holds lengths outside 0 .. {tokens.shape[1]}.")
        return tokens[rows], lengths[rows]


class PanelWriter:
    """Fills a panel checkpoint by checkpoint while readers may have it open (HDF5 SWMR).

    ``write_checkpoint`` writes each metric's column, flushes, then marks the checkpoint done and flushes again, so a
    reader (or a resumed run after a crash) never sees a done flag before its data. The file is opened straight into
    SWMR-write mode (readers are never refused, not even while it opens) and without HDF5's own file lock, which a
    reader that has the file open would hold: the caller guarantees a single writer (extraction's lock file).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        _check_file(self.path)  # the usual one-line errors for a missing, foreign, cut or damaged file
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
        fapl.set_fclose_degree(h5py.h5f.CLOSE_STRONG)
        fapl.set_file_locking(False, True)
        try:
            fid = h5py.h5f.open(os.fsencode(self.path), h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE, fapl=fapl)
        except OSError as exc:
            raise MemtuiError(f"{self.path} cannot be opened for writing ({str(exc).split('(')[0].strip()}).") from None
        self._f = h5py.File(fid)
        try:
            self.panel = _read(self._f, self.path)
        except BaseException as exc:
            self._f.close()
            if isinstance(exc, MemtuiError) or not isinstance(exc, Exception):
                raise
            raise MemtuiError(f"{self.path} cannot be read ({clean(exc, 160)}); it may be corrupt.") from None

    def __enter__(self) -> PanelWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._f.id.valid:
            self._f.close()

    def write_checkpoint(
        self,
        index: int,
        columns: Mapping[str, np.ndarray],
        *,
        revision: str | None = None,
        weights_hash: str = "",
        model: str = "",
        parameters: int = 0,
        config: str = "",
        average: str = "",
        scoring: str = "",
    ) -> None:
        """Commit checkpoint ``index``'s columns and provenance, then its done flag. ``average``: the kind of weight
        average its model is (ema, soup, ...; "" for one model's training state), kept in ``checkpoints/average``
        so the mark travels with the panel (panels made before it keep it only in ``PANEL.work/checkpoints.json``).
        ``scoring``: how its column was scored (memtui.panel.scoring.describe), in ``checkpoints/scoring``."""
        f = self._f
        n = self.panel.n_instances
        for name, col in columns.items():
            if name not in f["metrics"]:
                raise MemtuiError(f"{self.path}: no metric '{name}' in this panel; it was built without it.")
            f["metrics"][name][:, index] = _checked_array(f"column of '{name}'", col, np.float64, (n,))
        if revision is not None:
            f["checkpoints/revision"][index] = revision.encode()[:256]
        f["checkpoints/weights_hash"][index] = weights_hash.encode()[:64]
        if "checkpoints/model" in f:  # panels made before it existed keep their provenance in the progress file
            f["checkpoints/model"][index] = model.encode()[:256]
        if "checkpoints/parameters" in f:
            f["checkpoints/parameters"][index] = int(parameters)
            f["checkpoints/config"][index] = config.encode()[:256]
        if "checkpoints/average" in f:
            f["checkpoints/average"][index] = average.encode()[:AVERAGE_BYTES]
        if "checkpoints/scoring" in f:  # panels made before it record no scoring
            f["checkpoints/scoring"][index] = scoring.encode()[:SCORING_BYTES]
        f["checkpoints/finished_at"][index] = time.time()
        f.flush()
        f["checkpoints/done"][index] = 1
        f.flush()
        self.panel.done[index] = True
