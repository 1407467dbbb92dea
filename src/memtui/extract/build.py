"""Build a panel waiting for extraction: instances (token ids + treatment step) and the checkpoint steps.

Every source is an order behind ``memtui.orders.base.Order`` (the registry: ``memtui.orders.registry``): a
Pythia-layout memmap, a token table with treatment steps, and the families' own data orders (GPT-NeoX / Megatron
maps, OLMo, OLMo-core, Amber). ``build_order`` does what all of them share: the panels' files are refused when they
exist, the order samples, the instances are checked and written, a seed suite whole or not at all. The
``build_from_*`` functions are the Python API of each order (the demos and tests call them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.files import refuse_existing
from memtui.extract.checkpoints import parse_checkpoints
from memtui.orders.arrays import check_token_range, load_token_array, open_memmap  # noqa: F401 - the public API
from memtui.orders.base import Instances, Order, SamplingSpec
from memtui.orders.kinds.memmap import sample_memmap_rows  # noqa: F401 - the public API
from memtui.panel import metrics as registry
from memtui.panel.hdf5 import create_panel
from memtui.panel.model import NEVER


def checkpoint_steps(steps: str | Sequence[int] | None) -> list[int] | None:
    """``--steps`` as the sorted checkpoint steps (None: the order's default); 'all' is refused."""
    if steps is None:
        return None
    step_list = parse_checkpoints(steps) if isinstance(steps, str) else sorted({int(s) for s in steps})
    if step_list is None:
        raise MemtuiError("give the panel's checkpoint steps explicitly (e.g. 0:95000:1000), not 'all'.")
    return step_list


def build_order(
    order: Order, out: str | os.PathLike, spec: SamplingSpec, *, attrs: dict | None = None, overwrite: bool = False
) -> list[Path]:
    """The panels of a configured order (``Order.check``'s result): refused where a file exists (before any
    sampling), sampled, written; a seed suite is written whole or not at all. Returns the panels written."""
    outs = order.outputs(Path(out))
    for path in outs:
        refuse_existing(path, overwrite)
    panels = order.sample(replace(spec, steps=checkpoint_steps(spec.steps)))
    if len(panels) != len(outs):
        raise MemtuiError(f"--order {order.name} sampled {len(panels)} panels for {len(outs)} files.")
    written: list[Path] = []
    try:
        for path, inst in zip(outs, panels, strict=True):
            written.append(write_instances(path, inst, attrs=attrs, overwrite=overwrite))
    except BaseException:
        for path in written:  # a suite is whole or absent
            path.unlink(missing_ok=True)
        raise
    return written


def write_instances(out: Path, inst: Instances, *, attrs: dict | None = None, overwrite: bool = False) -> Path:
    """The step every order shares: check the token ids, refuse a panel without controls, write it atomically."""
    treatment = np.asarray(inst.treatment, dtype=np.int64)
    if inst.checked:
        if not (treatment == NEVER).any():
            raise MemtuiError("the panel would have no never-trained controls; give --n-validation > 0 (and a source).")
        if not (treatment != NEVER).any():
            raise MemtuiError("no training instance falls into the panel's checkpoint steps; check --steps.")
        check_token_range(inst.tokens, inst.lengths, out)
    source_index = inst.source_index if inst.source_index is not None else inst.provenance.get("position")
    every = {**inst.attrs, **(attrs or {})}
    metrics = registry.STANDARD + (registry.GOLDFISH if "goldfish_k" in every else ())  # a loss mask: trained-only too
    return create_panel(
        out,
        metrics=metrics,
        ids=inst.ids,
        treatment=treatment,
        steps=inst.steps,
        source_index=source_index,
        tokens=inst.tokens,
        lengths=inst.lengths,
        revisions=inst.revisions,
        attrs=every,
        provenance=inst.provenance or None,
        provenance_attrs=inst.provenance_attrs,
        overwrite=overwrite,
    )


def _one(order: Order, out, spec: SamplingSpec, attrs: dict | None, overwrite: bool) -> Path:
    return build_order(order, out, spec, attrs=attrs, overwrite=overwrite)[0]


# -- each order's Python API ------------------------------------------------------------------------------------------


def build_from_memmap(
    out,
    memmap,
    validation,
    *,
    steps=None,
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
    from memtui.orders.kinds.memmap import Memmap

    order = Memmap(memmap=memmap, validation=validation, batch_size=batch_size, seq_len=seq_len)
    spec = SamplingSpec(steps=steps, macro=macro, k=k, m=m, n_controls=n_validation, seed=seed)
    return _one(order, out, spec, attrs, overwrite)


def build_from_tokens(
    out,
    tokens_file,
    *,
    steps=None,
    treatment_column: str = "treatment_step",
    tokens_column: str = "tokens",
    treatment_file=None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Panel from token ids with a treatment step per row (-1 = never trained, a validation instance).

    .parquet: a list column of token ids and a treatment column (optional ``id``), or the released Pythia panel's
    ``input_ids`` and ``seq_idx`` (treatment from the training-order index, ids the ``seq_idx``); .npz: arrays
    ``tokens``, ``treatment_step`` (or the named column), optional ``lengths`` and ``id``; .npy: the token matrix,
    with the treatment steps in ``treatment_file`` (.npy). ``steps`` defaults to 0 and every treatment step.
    """
    from memtui.orders.kinds.table import Table

    order = Table(
        tokens=Path(tokens_file),
        treatment_column=treatment_column,
        tokens_column=tokens_column,
        treatment_file=treatment_file,
    )
    return _one(order, out, SamplingSpec(steps=steps), attrs, overwrite)


def build_from_neox(
    out,
    tokens,
    maps,
    *,
    batch_size: int,
    seq_len: int | None = None,
    steps=None,
    macro: int = 1000,
    k: int = 10,
    m: int = 10,
    n_controls: int | None = None,
    controls: str = "beyond",
    validation=None,
    train_steps: int | None = None,
    seed: int = 0,
    seeds: Sequence[str] | None = None,
    seed_names: Sequence[str] | None = None,
    perturbation_info=None,
    examples=None,
    cache=None,
    attrs: dict | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Panel(s) from a GPT-NeoX / Megatron order (``memtui.orders.kinds.neox``): ``seeds`` are other seeds' maps of
    the same corpus (one panel ``OUT-{seed}.h5`` per seed), ``perturbation_info`` Hubble's inserted examples.
    Returns the panels written."""
    from memtui.orders.kinds.neox import Neox

    order = Neox(
        tokens=tokens,
        maps=maps,
        batch_size=batch_size,
        seq_len=seq_len,
        validation=validation,
        perturbation_info=perturbation_info,
        examples=examples,
        cache=cache,
        attrs=dict(attrs or {}),
    ).suite(seeds, seed_names, controls)
    spec = SamplingSpec(
        steps=steps, macro=macro, k=k, m=m, n_controls=n_controls, controls=controls, train_steps=train_steps, seed=seed
    )
    return build_order(order, out, spec, overwrite=overwrite)


def build_from_olmo(
    out,
    config,
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
    from memtui.orders.kinds.olmo import Olmo

    order = Olmo(
        config=config,
        data_root=data_root,
        heldout=heldout,
        stage_name=stage_name,
        step_offset=step_offset,
        cache=cache,
        options={"global_indices": global_indices},
    )
    spec = SamplingSpec(
        steps=steps, macro=macro, k=k, m=m, n_controls=n_controls, controls=controls, train_steps=train_steps, seed=seed
    )
    return _one(order, out, spec, attrs, overwrite)


def build_from_olmo_core(
    out,
    config,
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
    from memtui.orders.kinds.olmo import OlmoCore

    order = OlmoCore(
        config=config,
        data_root=data_root,
        heldout=heldout,
        stage_name=stage_name,
        step_offset=step_offset,
        cache=cache,
        options={"data_paths": data_paths, "epoch": epoch},
    )
    spec = SamplingSpec(
        steps=steps, macro=macro, k=k, m=m, n_controls=n_controls, controls=controls, train_steps=train_steps, seed=seed
    )
    return _one(order, out, spec, attrs, overwrite)


def build_from_amber(
    out,
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
    from memtui.orders.kinds.amber import Amber

    order = Amber(chunks=chunks, heldout=heldout, seq_len=seq_len)
    spec = SamplingSpec(steps=steps, k=k, m=m, n_controls=n_controls, controls=controls, seed=seed)
    return _one(order, out, spec, attrs, overwrite)
