"""The document metadata Dolma's tokenizer writes beside each OLMo token file: which document, from which source file,
each token range comes from.

``dolma tokens`` (python/dolma/tokenizer/memmap_writer.py) writes ``part-N.npy`` and ``part-N.csv.gz``: one CSV row
per document, without a header, ``start,end,id,src,loc`` (``MemmapMetadata``): the document's token range
``[start, end)`` in the ``.npy``, its id, the path of the JSON-lines file it was read from (which names the source:
``.../documents/books/books-0000.json.gz``) and its line there. An instance that starts at token ``offset`` of the
file comes from the document whose range holds that token.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Sequence

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.orders.sources import exists
from memtui.orders.tokenfiles import file_size, read_range

_SUFFIXES = re.compile(r"(\.npy?)?(\.[a-zA-Z]+)*$")  # what the writer strips before adding .npy / .csv.gz


def metadata_path(token_path: str) -> str:
    """Where Dolma put the metadata of a token file (``part-3.npy`` -> ``part-3.csv.gz``)."""
    head, sep, tail = token_path.rpartition("/")
    return f"{head}{sep}{_SUFFIXES.sub('', tail)}.csv.gz"


def read_metadata(path: str) -> tuple[np.ndarray, list[str], list[str]]:
    """(document starts, ids, source paths) of one ``.csv.gz``, sorted by start; one-line refusal of a bad file."""
    try:
        text = gzip.decompress(read_range(path, 0, file_size(path))).decode("utf-8")
        rows = list(csv.reader(io.StringIO(text)))
        starts = np.array([int(r[0]) for r in rows], dtype=np.int64)
        ids, srcs = [r[2] for r in rows], [r[3] for r in rows]
    except (OSError, EOFError, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise MemtuiError(
            f"{clean(path, 160)}: not Dolma's document metadata (start,end,id,src,loc per row): {clean(exc, 80)}."
        ) from None
    order = np.argsort(starts, kind="stable")
    return starts[order], [ids[i] for i in order], [srcs[i] for i in order]


def document_of(files: Sequence[str], file: np.ndarray, token_offset: np.ndarray) -> dict[str, np.ndarray] | None:
    """Per instance (its token file index and first token), the Dolma document it starts in: ``document_id`` and
    ``document_source`` (text; "" where a file has no metadata). None where no file of the sample has any."""
    ids = np.full(len(file), "", dtype=object)
    srcs = np.full(len(file), "", dtype=object)
    found = False
    for f in np.unique(file):
        meta = metadata_path(files[int(f)])
        if not exists(meta):
            continue
        found = True
        starts, doc_ids, doc_srcs = read_metadata(meta)
        rows = np.flatnonzero(file == f)
        doc = np.searchsorted(starts, token_offset[rows], side="right") - 1
        if (doc < 0).any():
            raise MemtuiError(f"{clean(meta, 160)}: no document holds token {int(token_offset[rows][doc < 0][0])}.")
        ids[rows] = [doc_ids[d] for d in doc]
        srcs[rows] = [doc_srcs[d] for d in doc]
    return {"document_id": ids.astype(str), "document_source": srcs.astype(str)} if found else None
