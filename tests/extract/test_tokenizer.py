"""The panel's tokenizer, found offline (extract/tokenizer.py): bytes, a checkpoint folder's files, or none."""

from __future__ import annotations

import numpy as np
import pytest

from memtui.extract.tokenizer import NO_TOKENIZER, decoder_for
from memtui.panel.hdf5 import PanelWriter, create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.report.instances import shown


def _panel(path, attrs=None):
    tokens = np.arange(24, dtype=np.int32).reshape(4, 6) % 5
    return create_panel(
        path, ids=np.arange(4), treatment=[10, 10, NEVER, NEVER], steps=[0, 10], tokens=tokens, attrs=attrs
    )


def test_a_byte_panel_decodes_utf8_with_a_character_on_its_last_byte(tmp_path):
    panel = read_panel(_panel(tmp_path / "p.h5", {"tokenizer": "bytes (token id = UTF-8 byte)"}))
    decoder = decoder_for(panel)
    assert decoder.found and decoder.description.startswith("bytes")
    ids = list("aé".encode())
    assert decoder.pieces(ids) == ["a", "", "é"]
    assert decoder.text(list(b"ok\n")) == "ok\n"


def test_escape_sequences_decoded_from_tokens_never_reach_the_terminal(tmp_path):
    panel = read_panel(_panel(tmp_path / "p.h5", {"tokenizer": "bytes (token id = UTF-8 byte)"}))
    text = decoder_for(panel).text(list("\x1b[2J\x1b]0;owned\x07hi\r\n\x9b1m\u202e".encode()))
    safe = shown(text)
    assert "\x1b" not in safe and "\x07" not in safe and "\x9b" not in safe and "\u202e" not in safe
    assert "\r" not in safe and "\n" not in safe
    assert safe.startswith("?[2J?]0;owned?hi↵")


def test_without_a_tokenizer_the_ids_are_shown_and_said(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    panel = read_panel(_panel(tmp_path / "p.h5"))
    decoder = decoder_for(panel)
    assert not decoder.found and decoder.description == NO_TOKENIZER
    assert decoder.text([3, 4]) == "3 4 "


@pytest.fixture
def tokenizer_folder(tmp_path):
    """A checkpoint folder of folders with a word-level tokenizer's files in the folder above the checkpoints."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "\x1b[31mred": 3, "again": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    root = tmp_path / "ckpts"
    (root / "step10").mkdir(parents=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(root)
    return root


def test_a_tokenizer_beside_the_checkpoints_is_found_offline(tmp_path, tokenizer_folder, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = _panel(tmp_path / "p.h5")
    cols = {name: np.zeros(4) for name in read_panel(path).metrics}
    with PanelWriter(path) as w:  # extraction records each checkpoint's folder and the model's
        w.write_checkpoint(1, cols, revision=str(tokenizer_folder / "step10"), model=str(tokenizer_folder))
    decoder = decoder_for(read_panel(path))
    assert decoder.found and "ckpts" in decoder.description
    assert [p.strip() for p in decoder.pieces([1, 2, 77])] == ["hello", "world", "⟨77⟩"]  # 77: not in the vocabulary
    assert "\x1b" not in shown(decoder.text([3]))
