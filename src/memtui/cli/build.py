"""`memtui build`: build a panel to extract into, from a Pythia-layout memmap or a token-id file."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError

SUMMARY = "build a panel to extract into, from a Pythia-layout memmap or a token-id file"
DESCRIPTION = (
    "Either --memmap (rows of --seq-len uint16 tokens in training order) with --validation, "
    "sampled per macro-batch like Lesci et al.; or --tokens (npy/npz/parquet) with a treatment-step column."
)


def add_arguments(p) -> None:
    p.add_argument("out", type=Path, help="panel file to create (.h5)")
    p.add_argument("--memmap", type=Path, help="Pythia-layout token file (.bin uint16 or .npy)")
    p.add_argument("--validation", type=Path, help="never-trained validation token ids (.npy, rows x length)")
    p.add_argument("--tokens", type=Path, help="token ids with treatment steps (.npz, .parquet, or .npy)")
    p.add_argument(
        "--treatment-column",
        default="treatment_step",
        help="column of a --tokens table holding each row's treatment step (derived from seq_idx when the table has "
        "that column instead, as in Lesci et al.'s release)",
    )
    p.add_argument(
        "--tokens-column",
        default="tokens",
        help="column of a --tokens table holding each row's token ids (input_ids when the table has that instead)",
    )
    p.add_argument("--treatment-file", type=Path, help="treatment steps (.npy) for an .npy token matrix")
    p.add_argument("--steps", help="the panel's checkpoint steps [default: every macro-batch / every treatment step]")
    p.add_argument("--batch-size", type=int, default=1024, help="rows per training step (memmap)")
    p.add_argument("--macro", type=int, default=1000, help="steps per macro-batch = checkpoint interval (memmap)")
    p.add_argument("--batches", "-k", type=int, default=10, help="batches sampled per macro-batch")
    p.add_argument("--rows", "-m", type=int, default=10, help="rows sampled per batch")
    p.add_argument("--n-validation", type=int, default=None, help="validation rows to sample [default: all]")
    p.add_argument("--seq-len", type=int, default=2049, help="tokens per row of --memmap (Pythia's: 2049)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled batches, rows and validation rows (memmap)")
    p.add_argument("--force", action="store_true", help="overwrite OUT")


def run(args) -> int:
    from memtui.extract.build import build_from_memmap, build_from_tokens

    if bool(args.memmap) == bool(args.tokens):
        raise MemtuiError("give either --memmap (with --validation) or --tokens.")
    if args.memmap:
        if not args.validation:
            raise MemtuiError("--memmap needs --validation: never-trained token rows (.npy) for the control group.")
        out = build_from_memmap(
            args.out,
            args.memmap,
            args.validation,
            steps=args.steps,
            batch_size=args.batch_size,
            macro=args.macro,
            k=args.batches,
            m=args.rows,
            n_validation=args.n_validation,
            seq_len=args.seq_len,
            seed=args.seed,
            overwrite=args.force,
        )
    else:
        out = build_from_tokens(
            args.out,
            args.tokens,
            steps=args.steps,
            treatment_column=args.treatment_column,
            tokens_column=args.tokens_column,
            treatment_file=args.treatment_file,
            overwrite=args.force,
        )
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(out)
    n_val = int(panel.never_treated.sum())
    print(
        f"built {out}: {panel.n_instances} instances ({panel.n_instances - n_val} treated, {n_val} validation), "
        f"{panel.n_checkpoints} checkpoints {panel.steps[0]}..{panel.steps[-1]}; "
        f"next: memtui extract {out} --model MODEL"
    )
    short = _short_rows(panel)
    if short:
        print(short)
    return 0


def _short_rows(panel) -> str | None:
    """A warning when rows are too short for the extractability metrics, which extraction then leaves empty."""
    if panel.lengths is None or panel.extractable_kl is None:
        return None
    k, ell = panel.extractable_kl
    short = int((panel.lengths < k + ell).sum())
    if not short:
        return None
    return (
        f"warning: {short} of {panel.n_instances} instances are shorter than k + l = {k + ell} tokens, so their "
        f"extractable and extractable_len stay empty ({k} prefix tokens, then {ell} to reproduce)"
    )
