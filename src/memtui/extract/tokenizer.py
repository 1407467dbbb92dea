"""The panel's tokenizer, found offline, to show an instance's token ids as text.

Where it comes from, first found wins:

1. the panel's ``tokenizer`` attribute ``bytes ...`` (memtui's demos: token id = UTF-8 byte);
2. tokenizer files (``tokenizer.json``, ``tokenizer_config.json``, ``vocab.json``) in a checkpoint folder the panel
   recorded (``checkpoints/revision`` of a local extraction) or in the folder above them (the folder of checkpoints);
3. the Hugging Face cache of a model the panel recorded (``checkpoints/model``, a repo id), never the network.

Without one, the ids are shown as numbers and :attr:`Decoder.description` says so. What a decoder returns is raw
text from a file: ``report.instances.shown`` makes it safe for a terminal (no ESC sequence, no control character).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memtui.core.text import clean
from memtui.panel.model import Panel

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
NO_TOKENIZER = "no tokenizer found offline (the panel's model folder or the Hugging Face cache): token ids shown"


@dataclass(frozen=True)
class Decoder:
    """Token ids to text: the whole row (:meth:`text`) or one piece per token (:meth:`pieces`, for colouring)."""

    description: str
    _pieces: Callable[[Sequence[int]], list[str]] | None = None

    @property
    def found(self) -> bool:
        return self._pieces is not None

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """One raw string per token (a multi-byte character lands on its last byte's token); ids without a
        tokenizer, each followed by a space."""
        ids = [int(i) for i in ids]
        if self._pieces is None:
            return [f"{i} " for i in ids]
        return self._pieces(ids)

    def text(self, ids: Sequence[int]) -> str:
        return "".join(self.pieces(ids))


def _byte_pieces(ids: list[int]) -> list[str]:
    """Bytes to text, one piece per byte: a character spread over several bytes is shown on the last."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out = [decoder.decode(bytes([i]) if 0 <= i < 256 else b"\xff") for i in ids]
    out[-1:] = [out[-1] + decoder.decode(b"", final=True)] if out else []
    return out


def decoder_for(panel: Panel) -> Decoder:
    """The panel's tokenizer, found offline (module docstring), or a decoder that shows the ids."""
    if panel.attrs.get("tokenizer", "").startswith("bytes"):
        return Decoder("bytes (token id = UTF-8 byte), from the panel", _byte_pieces)
    for where, kwargs in _candidates(panel):
        tok = _load(where, kwargs)
        if tok is not None:
            return Decoder(f"tokenizer of {clean(where, 120)}", _hf_pieces(tok))
    return Decoder(NO_TOKENIZER)


def _candidates(panel: Panel) -> list[tuple[str, dict]]:
    """Folders holding tokenizer files, then repo ids for the Hugging Face cache, each once, in the panel's order."""
    folders: list[str] = []
    repos: list[tuple[str, dict]] = []
    for model, revision in zip(panel.models or [""] * len(panel.revisions), panel.revisions, strict=False):
        for text in (revision, model):
            if not text or len(text) > 4096 or "\x00" in text:
                continue
            path = Path(text).expanduser()
            for folder in (path, path.parent):
                if _has_tokenizer(folder) and str(folder) not in folders:
                    folders.append(str(folder))
        repo = _repo_id(model or revision.split("@")[0])
        if repo:
            name = revision.split("@", 1)[1] if "@" in revision else None
            for kwargs in ({}, {"revision": name} if name else None):
                if kwargs is not None and (repo, kwargs) not in repos:
                    repos.append((repo, kwargs))
    return [(f, {}) for f in folders] + repos


def _has_tokenizer(folder: Path) -> bool:
    try:
        return folder.is_dir() and any((folder / name).is_file() for name in TOKENIZER_FILES)
    except OSError:
        return False


def _repo_id(text: str) -> str:
    """``owner/name`` where ``text`` looks like a Hugging Face repo id (not a path)."""
    if text.count("/") != 1 or text.startswith((".", "/", "~")) or os.sep != "/" and os.sep in text:
        return ""
    owner, name = text.split("/")
    ok = all(part and all(c.isalnum() or c in "-_." for c in part) for part in (owner, name))
    return text if ok else ""


def _load(where: str, kwargs: dict):
    """A transformers tokenizer from a folder or the cache, offline; None where there is none or it cannot load."""
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        return AutoTokenizer.from_pretrained(where, local_files_only=True, **kwargs)
    except Exception:  # noqa: BLE001 - a missing, partial or foreign tokenizer only means the ids are shown instead
        return None


def _hf_pieces(tok) -> Callable[[Sequence[int]], list[str]]:
    vocab = int(getattr(tok, "vocab_size", 0) or 0) + len(getattr(tok, "get_added_vocab", dict)())

    def pieces(ids: Sequence[int]) -> list[str]:
        out = []
        for i in ids:
            if not 0 <= i < max(vocab, 1):
                out.append(f"⟨{i}⟩")  # not in the vocabulary: shown as its id, never passed to the tokenizer
                continue
            try:
                out.append(tok.decode([i], clean_up_tokenization_spaces=False))
            except Exception:  # noqa: BLE001 - a tokenizer that fails on one id shows that id, not a crash
                out.append(f"⟨{i}⟩")
        return out

    return pieces
