"""GPT-NeoX / Megatron data orders read exactly: the tokenised corpus and the index maps that order it.

The corpus is a Megatron ``MMapIndexedDataset``: ``PREFIX.idx`` (header, then per-document token counts and byte
pointers) and ``PREFIX.bin`` (the tokens). The training order is three index maps built from a seed:

- ``doc_idx``: documents in shuffled order (repeated once per epoch);
- ``sample_idx``: row ``j`` is ``(position in doc_idx, token offset)`` where sample ``j`` starts; samples are windows
  of ``seq_len + 1`` tokens of the concatenated shuffled documents, ``seq_len`` tokens apart (consecutive samples
  share one token: the last label of one is the first input of the next);
- ``shuffle_idx``: training position ``i`` reads sample ``shuffle_idx[i]``.

Reading sequence ``i`` (GPT-NeoX ``GPT2Dataset.__getitem__`` and Megatron-core ``GPTDataset`` agree, and the tests
compare every panel instance with the latter): ``j = shuffle_idx[i]``, ``(d0, o0) = sample_idx[j]``,
``(d1, o1) = sample_idx[j + 1]``; the tokens are documents ``doc_idx[d0..d1]`` from offset ``o0`` of the first to
offset ``o1`` of the last, inclusive. Sequence ``i`` is in batch ``i // batch_size``, trained at step
``i // batch_size + 1``; checkpoint ``stepN`` has taken N steps, so the first checkpoint that has seen it is the
smallest saved step ``>= i // batch_size + 1``.

Two file namings are recognised for the maps: GPT-NeoX's ``PREFIX_doc_idx.npy`` / ``_sample_idx.npy`` /
``_shuffle_idx.npy`` (PolyPythias, Hubble) and Megatron-core's ``PREFIX-document_index.npy`` / ``-sample_index.npy``
/ ``-shuffle_index.npy``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.orders.sources import ArrayView, exists, npy_array, open_source
from memtui.panel.model import NEVER

IDX_MAGIC = b"MMIDIDX\x00\x00"
IDX_VERSION = 1
# Megatron's dtype codes (megatron.core.datasets.indexed_dataset.DType; GPT-NeoX uses the same numbers)
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
TOKEN_CODES = {1, 2, 3, 4, 5, 8}  # integer token ids only
HEADER = 9 + 8 + 1 + 8 + 8  # magic, version, dtype code, sequence count, document count

MAP_NAMES = {
    "neox": ("_doc_idx.npy", "_sample_idx.npy", "_shuffle_idx.npy"),
    "megatron": ("-document_index.npy", "-sample_index.npy", "-shuffle_index.npy"),
}


class IndexedTokens:
    """A Megatron ``MMapIndexedDataset`` (``PREFIX.idx`` + ``PREFIX.bin``), local or remote, never read whole.

    "Document" here is what the GPT datasets index: one entry of the ``.idx`` size table (Megatron calls it a
    sequence; GPT-NeoX and Megatron-core's ``GPTDataset`` shuffle these entries as documents).
    """

    def __init__(self, prefix: str | os.PathLike, *, cache_dir=None, progress=None):
        self.prefix = str(prefix)
        idx, binary = f"{self.prefix}.idx", f"{self.prefix}.bin"
        if not exists(idx):
            raise MemtuiError(f"{idx}: no such index file; --tokens takes the prefix of PREFIX.idx and PREFIX.bin.")
        if not exists(binary):
            raise MemtuiError(f"{binary}: no such token file beside {idx}.")
        self._idx = open_source(idx, cache_dir, progress)
        if self._idx.size < HEADER:
            raise MemtuiError(f"{idx}: {self._idx.size} bytes, too short for a Megatron index header.")
        head = self._idx.read(0, HEADER)
        if head[:9] != IDX_MAGIC:
            raise MemtuiError(f"{idx}: not a Megatron MMapIndexedDataset index (bad magic {head[:9]!r}).")
        (version,) = struct.unpack("<Q", head[9:17])
        if version != IDX_VERSION:
            raise MemtuiError(f"{idx}: index version {version}; only version {IDX_VERSION} is known.")
        code = head[17]
        if code not in TOKEN_CODES:
            raise MemtuiError(f"{idx}: dtype code {code} is not an integer token type (known: {sorted(TOKEN_CODES)}).")
        self.dtype = np.dtype(DTYPES[code])
        n, n_doc_marks = struct.unpack("<QQ", head[18:34])
        self.n_documents = int(n)
        self.sizes = ArrayView(self._idx, HEADER, np.int32, (n,))
        self.pointers = ArrayView(self._idx, HEADER + 4 * n, np.int64, (n,))
        ArrayView(self._idx, HEADER + 12 * n, np.int64, (int(n_doc_marks),))  # the header's promise is checked
        self._bin = open_source(binary, cache_dir, progress)
        if n:
            last_ptr = int(self.pointers.take([n - 1])[0])
            end = last_ptr + int(self.sizes.take([n - 1])[0]) * self.dtype.itemsize
            if self._bin.size < end:
                raise MemtuiError(
                    f"{binary}: truncated: {self._bin.size} bytes, but its index ends the last document at byte {end}."
                )

    def document(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset .. offset+length`` of document ``i`` (to its end when ``length`` is None), as int64."""
        size = int(self.sizes.take([i])[0]) if 0 <= i < self.n_documents else -1
        if size < 0:
            raise MemtuiError(f"{self.prefix}: document {i} is past the dataset's {self.n_documents} documents.")
        length = size - offset if length is None else length
        if offset < 0 or length < 0 or offset + length > size:
            raise MemtuiError(f"{self.prefix}: tokens {offset}..{offset + length} are outside document {i} ({size}).")
        start = int(self.pointers.take([i])[0]) + offset * self.dtype.itemsize
        return self._read(start, length)

    def _read(self, byte: int, length: int) -> np.ndarray:
        # the token file is read by exact ranges (pread or HTTP), never mapped: a panel's few thousand scattered
        # documents would otherwise each pull ~100 KB of read-ahead into memory
        return np.frombuffer(self._bin.read(byte, length * self.dtype.itemsize), dtype=self.dtype).astype(np.int64)

    def read_pieces(self, documents, offsets, lengths) -> list[np.ndarray]:
        """Token pieces (document, offset, length) given as arrays, read in file order (one pass over the .bin)."""
        documents = np.asarray(documents, dtype=np.int64)
        pointers = self.pointers.take(documents)
        starts = pointers + np.asarray(offsets, dtype=np.int64) * self.dtype.itemsize
        out: list[np.ndarray] = [None] * len(documents)  # type: ignore[list-item]
        for k in np.argsort(starts, kind="stable"):
            out[k] = self._read(int(starts[k]), int(lengths[k]))
        return out


class IndexMaps:
    """The three index maps of one training order (one seed), memory-mapped or read by range, and checked."""

    def __init__(self, prefix: str | os.PathLike, *, cache_dir=None, progress=None):
        self.prefix = str(prefix)
        found = None
        for layout, names in MAP_NAMES.items():
            paths = [self.prefix + s for s in names]
            present = [exists(p) for p in paths]
            if all(present):
                found = layout, paths
                break
            if any(present):
                missing = ", ".join(os.path.basename(p) for p, ok in zip(paths, present, strict=True) if not ok)
                raise MemtuiError(f"{self.prefix}: index maps incomplete, {missing} is missing.")
        if found is None:
            neox = ", ".join(MAP_NAMES["neox"])
            raise MemtuiError(
                f"{self.prefix}: no index maps ({neox} for GPT-NeoX, or -document_index.npy... for Megatron-core)."
            )
        self.layout, (doc_path, sample_path, shuffle_path) = found
        self.doc_idx = npy_array(doc_path, cache_dir, progress)
        self.sample_idx = npy_array(sample_path, cache_dir, progress)
        self.shuffle_idx = npy_array(shuffle_path, cache_dir, progress)
        self.paths = (doc_path, sample_path, shuffle_path)
        self._check()

    def _check(self) -> None:
        named = (("doc", self.doc_idx, 1), ("sample", self.sample_idx, 2), ("shuffle", self.shuffle_idx, 1))
        for name, arr, ndim in named:
            if arr.dtype.kind not in "iu":
                raise MemtuiError(f"{self.prefix}: the {name} index holds {arr.dtype}, not integers.")
            if len(arr.shape) != ndim or (ndim == 2 and arr.shape[1] != 2):
                raise MemtuiError(f"{self.prefix}: the {name} index has shape {arr.shape}; expected {ndim}-D.")
        n_samples = len(self.sample_idx) - 1
        if n_samples < 1:
            raise MemtuiError(f"{self.prefix}: the sample index has no samples.")
        if len(self.shuffle_idx) > n_samples:
            raise MemtuiError(
                f"{self.prefix}: maps disagree in length: {len(self.shuffle_idx)} shuffled positions but only "
                f"{n_samples} samples (sample index rows - 1); are they from the same run?"
            )
        last = self.sample_idx.take([n_samples])[0]
        if last[0] >= len(self.doc_idx) or last[0] < 0 or last[1] < 0:
            raise MemtuiError(
                f"{self.prefix}: the sample index ends at document position {int(last[0])}, past the document "
                f"index's {len(self.doc_idx)} entries; are the maps from the same run?"
            )

    @property
    def n_sequences(self) -> int:
        """Training positions the maps order (the trained ones and those past the end of training)."""
        return len(self.shuffle_idx)

    def check_documents(self, n_documents: int) -> None:
        """A full scan: every document in doc_idx exists in the dataset (optional: reads the whole doc index)."""
        for _, chunk in self.doc_idx.chunks():
            if chunk.size and (chunk.min() < 0 or chunk.max() >= n_documents):
                raise MemtuiError(
                    f"{self.paths[0]}: names document {int(chunk.max())}, past the dataset's {n_documents} documents."
                )


@dataclass(frozen=True)
class Pieces:
    """Where instances' tokens come from: piece k is ``length[k]`` tokens of ``document[k]`` from ``offset[k]``,
    found at ``position[k]`` of doc_idx, and belongs to instance ``instance[k]`` (pieces of one instance in order)."""

    instance: np.ndarray
    position: np.ndarray
    document: np.ndarray
    offset: np.ndarray
    length: np.ndarray


class NeoxOrder:
    """One training order: sequence ``i`` (training position) -> its ``seq_len + 1`` tokens and its step."""

    def __init__(self, tokens: IndexedTokens, maps: IndexMaps, batch_size: int, seq_len: int | None = None):
        if batch_size < 1:
            raise MemtuiError(f"batch size must be >= 1, got {batch_size}.")
        self.tokens_source, self.maps, self.batch_size = tokens, maps, int(batch_size)
        first = self._pieces_of_samples(np.array([0]))
        inferred = int(first.length.sum()) - 1
        if seq_len is not None and int(seq_len) != inferred:
            raise MemtuiError(
                f"{maps.prefix}: the maps' samples hold {inferred + 1} tokens, not seq_len + 1 = {int(seq_len) + 1}."
            )
        self.seq_len = inferred

    @property
    def n_sequences(self) -> int:
        return self.maps.n_sequences

    def step(self, ids) -> np.ndarray:
        """Training step of positions ``ids``: ``i // batch_size + 1`` (checkpoint stepN has taken N steps)."""
        return np.asarray(ids, dtype=np.int64) // self.batch_size + 1

    def samples(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_sequences):
            bad = int(ids.max()) if ids.max() >= self.n_sequences else int(ids.min())
            raise MemtuiError(f"{self.maps.prefix}: training position {bad} is outside the {self.n_sequences} ordered.")
        j = self.maps.shuffle_idx.take(ids).astype(np.int64)
        if j.size and (j.min() < 0 or j.max() + 1 >= len(self.maps.sample_idx)):
            raise MemtuiError(
                f"{self.maps.paths[2]}: sample index {int(j.max())} is past the data "
                f"({len(self.maps.sample_idx) - 1} samples); the maps are not from one run."
            )
        return j

    def _pieces_of_samples(self, j: np.ndarray) -> Pieces:
        maps, data = self.maps, self.tokens_source
        start = maps.sample_idx.take(j).astype(np.int64)
        end = maps.sample_idx.take(j + 1).astype(np.int64)
        if (
            np.any(end[:, 0] < start[:, 0])
            or np.any(start < 0)
            or np.any(end < 0)
            or np.any(end[:, 0] >= len(maps.doc_idx))
        ):
            raise MemtuiError(f"{maps.paths[1]}: sample rows are not increasing or point past the document index.")
        count = end[:, 0] - start[:, 0] + 1
        instance = np.repeat(np.arange(len(j)), count)
        first = np.r_[0, np.cumsum(count)[:-1]]
        within = np.arange(len(instance)) - np.repeat(first, count)
        position = start[instance, 0] + within
        document = maps.doc_idx.take(position).astype(np.int64)
        if document.size and (document.min() < 0 or document.max() >= data.n_documents):
            raise MemtuiError(
                f"{maps.paths[0]}: names document {int(document.max())}, past the dataset's {data.n_documents}; "
                "are the maps built over this token file?"
            )
        size = data.sizes.take(document).astype(np.int64)
        is_first = within == 0
        is_last = within == np.repeat(count - 1, count)
        offset = np.where(is_first, start[instance, 1], 0)
        stop = np.where(is_last, end[instance, 1] + 1, size)  # exclusive
        if np.any(stop > size) or np.any(offset > stop):
            raise MemtuiError(f"{maps.paths[1]}: a sample offset is past its document's end; wrong token file?")
        return Pieces(instance, position, document, offset, stop - offset)

    def pieces(self, ids) -> Pieces:
        """Provenance of training positions ``ids``: the (document, offset, length) pieces of each sequence."""
        return self._pieces_of_samples(self.samples(ids))

    def tokens(self, ids) -> np.ndarray:
        """Token matrix ``(len(ids), seq_len + 1)`` (int64) of training positions ``ids``, read in file order."""
        return self.read(ids)[0]

    def read(self, ids) -> tuple[np.ndarray, Pieces]:
        """(token matrix, provenance) of training positions ``ids``; every sequence must hold seq_len + 1 tokens."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int64))
        p = self.pieces(ids)
        totals = np.bincount(p.instance, weights=p.length, minlength=len(ids)).astype(np.int64)
        bad = np.flatnonzero(totals != self.seq_len + 1)
        if bad.size:
            raise MemtuiError(
                f"{self.maps.prefix}: sequence {int(ids[bad[0]])} holds {int(totals[bad[0]])} tokens, not "
                f"{self.seq_len + 1}; the maps do not match this token file."
            )
        out = np.empty((len(ids), self.seq_len + 1), dtype=np.int64)
        # pieces of one instance are consecutive: a piece's column is the running length inside its instance
        column = np.cumsum(p.length) - p.length - (np.cumsum(totals) - totals)[p.instance]
        for k, piece in enumerate(self.tokens_source.read_pieces(p.document, p.offset, p.length)):
            out[p.instance[k], column[k] : column[k] + p.length[k]] = piece
        return out, p

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens([i])[0]

    # -- where given tokens were trained under this order (for seed suites) ---------------------------------------

    def exposure(self, pieces: Pieces, n_instances: int, *, chunk: int = 1 << 24) -> tuple[np.ndarray, np.ndarray]:
        """(first, full) training step at which this order trained any / all of each instance's tokens.

        ``pieces`` are token ranges of documents (see :func:`owned_pieces`). A token counts as trained at step s when
        it is an *input* token of a sequence trained at step s (each token of the concatenated documents is the input
        of exactly one sample, per epoch). With several epochs a token is trained once per occurrence of its
        document; its first training counts. ``full`` is the step by which every token had been trained; both are
        -1 (never) when some token is never trained within the ordered positions.
        """
        maps = self.maps
        wanted = np.unique(pieces.document)
        # every occurrence of the wanted documents in doc_idx: one scan, never the whole array in memory
        occ_pos, occ_doc = [], []
        for start, rows in maps.doc_idx.chunks(chunk):
            hit = np.flatnonzero(np.isin(rows, wanted))
            occ_pos.append(start + hit)
            occ_doc.append(rows[hit].astype(np.int64))
        occ_pos, occ_doc = np.concatenate(occ_pos), np.concatenate(occ_doc)
        order = np.argsort(occ_doc, kind="stable")
        occ_pos, occ_doc = occ_pos[order], occ_doc[order]
        lo = np.searchsorted(occ_doc, pieces.document, "left")
        hi = np.searchsorted(occ_doc, pieces.document, "right")
        # (piece, occurrence) pairs: the first and last token of the piece at that doc_idx position
        n_occ = hi - lo
        piece_of = np.repeat(np.arange(len(pieces.document)), n_occ)
        pos = occ_pos[np.repeat(lo, n_occ) + (np.arange(n_occ.sum()) - np.repeat(np.cumsum(n_occ) - n_occ, n_occ))]
        a = _owner(maps.sample_idx, pos, pieces.offset[piece_of])
        b = _owner(maps.sample_idx, pos, pieces.offset[piece_of] + pieces.length[piece_of] - 1)
        # samples a..b own the piece at this occurrence (usually one or two)
        span = np.where((a >= 0) & (b >= 0), b - a + 1, 0)
        sample = np.repeat(a, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))
        seg_pair = np.repeat(np.arange(len(a)), span)
        trained_at = _positions_of(maps.shuffle_idx, sample, chunk)
        step = np.where(trained_at >= 0, trained_at // self.batch_size + 1, -1)
        row0 = maps.sample_idx.take(sample).astype(np.int64)
        row1 = maps.sample_idx.take(np.minimum(sample + 1, len(maps.sample_idx) - 1)).astype(np.int64)
        p_of = piece_of[seg_pair]
        p_pos = pos[seg_pair]
        # the tokens of piece p owned by this sample: [from, to) in document offsets
        lo_tok = np.where(row0[:, 0] == p_pos, row0[:, 1], 0)
        hi_tok = np.where(row1[:, 0] == p_pos, row1[:, 1], np.iinfo(np.int64).max)
        lo_tok = np.maximum(lo_tok, pieces.offset[p_of])
        hi_tok = np.minimum(hi_tok, pieces.offset[p_of] + pieces.length[p_of])
        first = np.full(n_instances, -1, dtype=np.int64)
        full = np.full(n_instances, -1, dtype=np.int64)
        by_piece = np.argsort(p_of, kind="stable")
        bounds = np.searchsorted(p_of[by_piece], np.arange(len(pieces.document) + 1))
        inst_first: dict[int, int] = {}
        inst_full: dict[int, int] = {}
        never = set()
        for k in range(len(pieces.document)):
            seg = by_piece[bounds[k] : bounds[k + 1]]
            length = int(pieces.length[k])
            best = np.full(length, np.iinfo(np.int64).max, dtype=np.int64)
            base = int(pieces.offset[k])
            for s in seg:
                if step[s] < 0:
                    continue
                sl = slice(int(lo_tok[s]) - base, int(hi_tok[s]) - base)
                np.minimum(best[sl], step[s], out=best[sl])
            inst = int(pieces.instance[k])
            if length == 0:
                continue
            if best.max() == np.iinfo(np.int64).max:
                never.add(inst)
            trained = best[best < np.iinfo(np.int64).max]
            if trained.size:
                inst_first[inst] = min(inst_first.get(inst, trained.min()), int(trained.min()))
            inst_full[inst] = max(inst_full.get(inst, 0), int(best.max()))
        for inst, v in inst_first.items():
            first[inst] = v
        for inst, v in inst_full.items():
            if inst not in never:
                full[inst] = v
        return first, full


def _owner(sample_idx: ArrayView, position: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Sample whose input tokens include token ``offset`` of the document at doc_idx ``position`` (-1: none).

    Samples start at increasing (position, offset) pairs; sample j owns the tokens from its start up to (not
    including) sample j+1's start. A vectorised binary search over the memory-mapped rows: ~log2(n) reads per query.
    """
    n = len(sample_idx) - 1  # samples; row n is the end of the last one
    lo = np.zeros(len(position), dtype=np.int64)  # invariant: row lo <= query (when any row is)
    hi = np.full(len(position), n + 1, dtype=np.int64)  # rows >= hi are > query
    while True:
        active = hi - lo > 1
        if not active.any():
            break
        mid = (lo + hi) // 2
        rows = sample_idx.take(np.where(active, mid, 0)).astype(np.int64)
        le = (rows[:, 0] < position) | ((rows[:, 0] == position) & (rows[:, 1] <= offset))
        lo = np.where(active & le, mid, lo)
        hi = np.where(active & ~le, mid, hi)
    row0 = sample_idx.take(np.zeros(1, dtype=np.int64))[0].astype(np.int64)
    before_start = (position < row0[0]) | ((position == row0[0]) & (offset < row0[1]))
    return np.where(before_start | (lo >= n), -1, lo)


def _positions_of(shuffle_idx: ArrayView, samples: np.ndarray, chunk: int) -> np.ndarray:
    """Training position of each sample (its index in shuffle_idx), -1 for samples never placed: one scan."""
    out = np.full(len(samples), -1, dtype=np.int64)
    if not len(samples):
        return out
    wanted, inverse = np.unique(samples, return_inverse=True)
    found = np.full(len(wanted), -1, dtype=np.int64)
    for start, rows in shuffle_idx.chunks(chunk):
        hit = np.flatnonzero(np.isin(rows, wanted))
        where = np.searchsorted(wanted, rows[hit].astype(np.int64))
        fresh = found[where] < 0
        found[where[fresh]] = start + hit[fresh]
    return found[inverse]


def owned_pieces(order: NeoxOrder, ids) -> Pieces:
    """The input tokens of sequences ``ids`` (all but the last, label-only token, which the next sample owns)."""
    p = order.pieces(ids)
    last = np.r_[p.instance[1:] != p.instance[:-1], True]
    length = p.length - last.astype(np.int64)
    keep = length > 0
    return Pieces(p.instance[keep], p.position[keep], p.document[keep], p.offset[keep], length[keep])


def seed_steps(home: NeoxOrder, ids, others: list[NeoxOrder]) -> tuple[np.ndarray, np.ndarray]:
    """(first, full) steps of the home order's sequences ``ids`` under each order in ``others`` (shape n x S).

    "Same instance" across seeds means the same tokens of the same documents: the instance is the home sequence's
    input tokens, identified by their (document, offset) provenance, and under another seed those tokens were
    trained, as inputs, inside other sequences (another seed reshuffles documents, so its samples cut the documents
    at other places). ``full`` is the step by which every token of the instance had been trained under that seed,
    ``first`` the step when its first token was; they differ when the instance is split across sequences there.
    """
    p = owned_pieces(home, ids)
    n = len(np.atleast_1d(ids))
    first = np.empty((n, len(others)), dtype=np.int64)
    full = np.empty((n, len(others)), dtype=np.int64)
    for s, other in enumerate(others):
        if other.tokens_source.n_documents != home.tokens_source.n_documents:
            raise MemtuiError(f"{other.maps.prefix}: seeds of a suite must order the same token data.")
        first[:, s], full[:, s] = other.exposure(p, n)
    return first, full


def cohort(step, checkpoints) -> np.ndarray:
    """First checkpoint that has seen a sequence trained at ``step`` (NEVER past the last checkpoint)."""
    checkpoints = np.asarray(checkpoints, dtype=np.int64)
    step = np.asarray(step, dtype=np.int64)
    k = np.searchsorted(checkpoints, step, "left")
    inside = (k < len(checkpoints)) & (step >= 1)
    return np.where(inside, checkpoints[np.minimum(k, len(checkpoints) - 1)], NEVER)


@dataclass(frozen=True)
class PanelInstances:
    """What a panel needs from an order: ids (training positions), treatment (first checkpoint that saw them, or
    NEVER), steps (training step, also for controls: where they would have been), tokens and their provenance."""

    ids: np.ndarray
    treatment: np.ndarray
    step: np.ndarray
    tokens: np.ndarray
    pieces: Pieces


def sample_panel_instances(
    order: NeoxOrder,
    *,
    steps,
    per_cohort: int,
    n_controls: int = 0,
    seed: int = 0,
    controls: str = "beyond",
    train_steps: int | None = None,
) -> PanelInstances:
    """Seeded, stratified sample: ``per_cohort`` sequences trained between consecutive checkpoints ``steps``
    (cohort g = checkpoint g: trained at steps in (previous checkpoint, g]), plus ``n_controls`` never-trained ones.

    ``controls="beyond"``: sequences the maps order past the end of training (step > ``train_steps``, the model's
    last step; default the last checkpoint), drawn from the same shuffled distribution as the trained ones.
    ``controls="none"``: no controls here (the caller adds a validation set).
    """
    checkpoints = np.unique(np.asarray(steps, dtype=np.int64))
    if checkpoints.size == 0 or checkpoints.min() < 0:
        raise MemtuiError("give the panel's checkpoint steps (non-negative integers).")
    if per_cohort < 1:
        raise MemtuiError(f"per-cohort size must be >= 1, got {per_cohort}.")
    if controls not in ("beyond", "none"):
        raise MemtuiError(f"controls must be 'beyond' or 'none', got {controls!r}.")
    batch, n_seq = order.batch_size, order.n_sequences
    rng = np.random.default_rng(seed)
    ids, treat = [], []
    previous = 0
    for g in checkpoints:
        if g == 0:
            continue
        lo, hi = previous * batch, g * batch  # positions trained at steps previous+1 .. g
        previous = int(g)
        if hi > n_seq:
            raise MemtuiError(
                f"{order.maps.prefix}: checkpoint step {g} needs {hi} ordered sequences (batch {batch}); the maps "
                f"hold {n_seq}. Check --batch-size and --steps."
            )
        pick = lo + rng.choice(hi - lo, size=min(per_cohort, hi - lo), replace=False)
        ids.append(np.sort(pick))
        treat.append(np.full(len(pick), g, dtype=np.int64))
    if not ids:
        raise MemtuiError("no cohort: the panel's checkpoints must include a step after 0.")
    if controls == "beyond" and n_controls > 0:
        last = int(checkpoints.max() if train_steps is None else train_steps)
        if last < checkpoints.max():
            raise MemtuiError(f"train steps {last} is before the last checkpoint {int(checkpoints.max())}.")
        lo = last * batch
        if lo >= n_seq:
            raise MemtuiError(
                f"{order.maps.prefix}: no never-trained sequences: training ends at position {lo} (step {last} x "
                f"batch {batch}) and the maps hold {n_seq}. Use validation controls instead."
            )
        pick = lo + rng.choice(n_seq - lo, size=min(n_controls, n_seq - lo), replace=False)
        ids.append(np.sort(pick))
        treat.append(np.full(len(pick), NEVER, dtype=np.int64))
    ids, treat = np.concatenate(ids), np.concatenate(treat)
    tokens, pieces = order.read(ids)
    return PanelInstances(ids, treat, order.step(ids), tokens, pieces)


__all__ = [
    "IndexedTokens",
    "IndexMaps",
    "NeoxOrder",
    "PanelInstances",
    "Pieces",
    "cohort",
    "owned_pieces",
    "sample_panel_instances",
    "seed_steps",
]
