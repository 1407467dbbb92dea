"""`memtui build`: build a panel to extract into, from a Pythia-layout memmap, a token-id file, or a model family's
data order (``--order neox | olmo | olmo-core | amber``; docs/suites.md)."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError

SUMMARY = "build a panel to extract into, from a Pythia-layout memmap, a token-id file or a family's data order"
DESCRIPTION = (
    "Either --memmap (rows of --seq-len uint16 tokens in training order) with --validation, "
    "sampled per macro-batch like Lesci et al.; or --tokens (npy/npz/parquet) with a treatment-step column; "
    "or --order FAMILY: the family's own data order (GPT-NeoX/Megatron maps, an OLMo or OLMo-core config, Amber's "
    "chunks), -k batches x -m instances per cohort between the --steps checkpoints, with never-trained controls "
    "(--controls beyond: past the last trained step; validation: a held-out set). See docs/suites.md."
)
ORDERS = ("neox", "olmo", "olmo-core", "amber")


def add_arguments(p) -> None:
    p.add_argument("out", type=Path, help="panel file to create (.h5)")
    p.add_argument("--memmap", type=Path, help="Pythia-layout token file (.bin uint16 or .npy)")
    p.add_argument("--validation", type=Path, help="never-trained validation token ids (.npy, rows x length)")
    p.add_argument("--tokens", help="token ids with treatment steps (.npz, .parquet, or .npy)")
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
    p.add_argument("--batch-size", type=int, default=None, help="rows per training step (memmap: 1024)")
    p.add_argument("--macro", type=int, default=1000, help="steps per macro-batch = checkpoint interval (memmap)")
    p.add_argument("--batches", "-k", type=int, default=10, help="batches sampled per macro-batch")
    p.add_argument("--rows", "-m", type=int, default=10, help="rows sampled per batch")
    p.add_argument("--n-validation", type=int, default=None, help="validation rows to sample [default: all]")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per row (--memmap: 2049, Pythia's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled batches, rows and validation rows")
    p.add_argument("--force", action="store_true", help="overwrite OUT")

    o = p.add_argument_group(
        "any --order",
        "-k/-m: batches per cohort x instances per batch (neox: k x m sequences per cohort); --steps: the panel's "
        "checkpoints (default: every --macro steps); --n-validation: controls to draw [1000; neox --validation "
        "rows: all]; --seed: the sampling seed.",
    )
    o.add_argument("--order", choices=ORDERS, help="build from this family's data order (docs/suites.md)")
    o.add_argument("--controls", choices=("beyond", "validation"), default="beyond",
                   help="never-trained controls: 'beyond' the last trained step (--train-steps, else the last "
                        "checkpoint) in the same order, or a 'validation' / held-out set (required for seed suites "
                        "and later epochs)")  # fmt: skip
    o.add_argument("--train-steps", type=int, help="the model's last training step (beyond controls start after it)")

    n = p.add_argument_group(
        "--order neox (GPT-NeoX / Megatron index maps: Pythia, PolyPythias, Hubble)",
        "--tokens PREFIX: the Megatron corpus (PREFIX.idx + PREFIX.bin); --batch-size: sequences per step; "
        "--seq-len: tokens per sequence (the maps' seq_len + 1, checked); --validation: never-trained rows (.npy) for "
        "--controls validation. Paths may be URLs (read by byte ranges).",
    )
    n.add_argument("--index-maps", help="maps prefix (PREFIX_doc_idx.npy ... or -document_index.npy ...); "
                                        "with --preset polypythia the folder holding seed0/ ... seed9/")  # fmt: skip
    n.add_argument("--seeds", help="seed suite: more maps prefixes (comma list; --preset polypythia: seed numbers), "
                                   "one panel OUT-seedN.h5 per seed over the same instances")  # fmt: skip
    n.add_argument(
        "--preset",
        choices=("polypythia", "hubble"),
        help="the suite's batch, lengths and checkpoints (polypythia: --seed N picks the seed's maps)",
    )
    n.add_argument("--perturbation-info", type=Path,
                   help="Hubble's *_perturbation_info.json: add every inserted example, with its duplicates and "
                        "insertion steps")  # fmt: skip
    n.add_argument("--examples", type=Path, help="folder of tokenised perturbation datasets (seq_start insertions)")
    n.add_argument("--cache", type=Path, help="folder keeping the byte ranges read from remote files (resumable); "
                                              "olmo, olmo-core: the order's swap partners, 4 bytes an instance, "
                                              "for faster rebuilds (default: $MEMTUI_CACHE, else none)")  # fmt: skip

    c = p.add_argument_group(
        "--order olmo / olmo-core (AI2's OLMo 1, 2 and 3)",
        "the order is rebuilt from the config's seed, batch and token files; instances OLMo's repetition filter "
        "masks are dropped and counted. One stage per panel: a stage-2 config with --stage-name and --step-offset.",
    )
    c.add_argument("--config", type=Path, help="olmo: the training YAML; olmo-core: the run's config.json")
    c.add_argument("--global-indices", type=Path, help="olmo: the run's global_indices.npy (else rebuilt)")
    c.add_argument("--data-root", help="read the config's token files from this mirror instead")
    c.add_argument("--data-paths", type=Path, help="olmo-core: the run's data_paths.txt when the config lists none")
    c.add_argument("--epoch", type=int, default=1, help="olmo-core: the epoch the panel's steps are in")
    c.add_argument("--heldout", nargs="+", help="never-trained files for --controls validation (olmo: token files; "
                                                "amber: valid/*.jsonl)")  # fmt: skip
    c.add_argument("--stage-name", help="the stage's name (stage1, stage2-ingredient1, ...), recorded per instance")
    c.add_argument("--step-offset", type=int, default=0, help="panel steps before this stage's step 1")

    a = p.add_argument_group("--order amber (LLM360 Amber: chunk k trained before ckpt_k; --steps = chunk numbers)")
    a.add_argument("--chunks", help="folder of train_{k}.jsonl (or its parent), or a URL laid out as the hub dataset")


_FOR_ORDER = {  # options that belong to one kind of build: given with another, they would be silently ignored
    "neox": ("index_maps", "seeds", "preset", "perturbation_info", "examples", "cache"),
    "olmo": ("config", "global_indices", "data_root", "stage_name", "cache"),
    "olmo-core": ("config", "data_root", "data_paths", "stage_name", "cache"),
    "amber": ("chunks",),
}


def _refuse_foreign(args) -> None:
    allowed = set(_FOR_ORDER.get(args.order, ()))
    if args.order in ("olmo", "olmo-core", "amber"):
        allowed.add("heldout")
    for order, names in _FOR_ORDER.items():
        for name in names:
            if name not in allowed and getattr(args, name, None) is not None:
                flag = "--" + name.replace("_", "-")
                raise MemtuiError(
                    f"{flag} belongs to --order {order}" + (f", not {args.order}." if args.order else ".")
                )
    if args.heldout and "heldout" not in allowed:
        raise MemtuiError("--heldout belongs to --order olmo, olmo-core or amber.")
    if args.order and args.memmap:
        raise MemtuiError("give either --memmap or --order, not both.")


def run(args) -> int:
    _refuse_foreign(args)
    outs = _build_order(args) if args.order else [_build_classic(args)]
    from memtui.panel.hdf5 import read_panel

    for out in outs:
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
    if len(outs) > 1:
        print(f"a seed suite: memtui compare {' '.join(map(str, outs))}")
    return 0


def _build_classic(args) -> Path:
    from memtui.extract.build import build_from_memmap, build_from_tokens

    if bool(args.memmap) == bool(args.tokens):
        raise MemtuiError("give either --memmap (with --validation) or --tokens, or --order FAMILY.")
    if args.memmap:
        if not args.validation:
            raise MemtuiError("--memmap needs --validation: never-trained token rows (.npy) for the control group.")
        return build_from_memmap(
            args.out,
            args.memmap,
            args.validation,
            steps=args.steps,
            batch_size=1024 if args.batch_size is None else args.batch_size,
            macro=args.macro,
            k=args.batches,
            m=args.rows,
            n_validation=args.n_validation,
            seq_len=2049 if args.seq_len is None else args.seq_len,
            seed=args.seed,
            overwrite=args.force,
        )
    return build_from_tokens(
        args.out,
        Path(args.tokens),
        steps=args.steps,
        treatment_column=args.treatment_column,
        tokens_column=args.tokens_column,
        treatment_file=args.treatment_file,
        overwrite=args.force,
    )


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


def _sampling(args) -> dict:
    if args.batches < 1 or args.rows < 1:
        raise MemtuiError("-k (batches per cohort) and -m (instances per batch) must be >= 1.")
    if args.n_validation is not None and args.n_validation < 1:
        raise MemtuiError("--n-validation must be >= 1: a panel needs never-trained controls.")
    return {"steps": args.steps, "k": args.batches, "m": args.rows, "n_controls": args.n_validation,
            "controls": args.controls, "seed": args.seed, "overwrite": args.force}  # fmt: skip


def _build_order(args) -> list[Path]:
    from memtui.extract import build

    common = _sampling(args)
    if args.order != "neox":
        if args.batch_size is not None:
            raise MemtuiError(f"--order {args.order}: the batch size comes from the config, drop --batch-size.")
        if args.validation is not None:
            raise MemtuiError(f"--order {args.order}: held-out controls are --heldout FILES, not --validation.")
    if args.order == "amber":
        if not args.chunks:
            raise MemtuiError("--order amber needs --chunks DIR (the folder of train_{k}.jsonl) or a URL.")
        return [build.build_from_amber(args.out, args.chunks, heldout=args.heldout,
                                       seq_len=2049 if args.seq_len is None else args.seq_len, **common)]  # fmt: skip
    if args.order in ("olmo", "olmo-core"):
        if args.config is None:
            raise MemtuiError(f"--order {args.order} needs --config (the run's training config).")
        stage = {"heldout": args.heldout, "stage_name": args.stage_name, "step_offset": args.step_offset,
                 "macro": args.macro, "train_steps": args.train_steps, "data_root": args.data_root,
                 "cache": args.cache}  # fmt: skip
        if args.order == "olmo":
            return [build.build_from_olmo(args.out, args.config, global_indices=args.global_indices, **stage,
                                          **common)]  # fmt: skip
        return [build.build_from_olmo_core(args.out, args.config, data_paths=args.data_paths, epoch=args.epoch,
                                           **stage, **common)]  # fmt: skip
    return _build_neox(args, common)


def _build_neox(args, common: dict) -> list[Path]:
    from memtui.extract.build import build_from_neox
    from memtui.orders.hubble import hubble_checkpoints
    from memtui.orders.suites import HUBBLE, PYTHIA, polypythia_maps

    if not args.tokens:
        raise MemtuiError("--order neox needs --tokens PREFIX: the Megatron corpus (PREFIX.idx and PREFIX.bin).")
    if not args.index_maps:
        raise MemtuiError("--order neox needs --index-maps PREFIX (with --preset polypythia: the seeds' folder).")
    if args.perturbation_info is not None and args.preset not in (None, "hubble"):
        raise MemtuiError("--perturbation-info is Hubble's: use it with --preset hubble or no preset.")
    if args.preset == "hubble" and args.perturbation_info is None:
        raise MemtuiError("--preset hubble needs --perturbation-info FILE (the run's *_perturbation_info.json).")
    preset = {"polypythia": PYTHIA, "hubble": HUBBLE}.get(args.preset, {})
    batch = args.batch_size or preset.get("batch_size")
    if batch is None:
        raise MemtuiError("--order neox needs --batch-size (sequences per training step) or a --preset.")
    maps, seeds, names = args.index_maps, _list(args.seeds), None
    if args.preset == "polypythia":
        numbers = [_seed_number(s) for s in ([args.seed] + seeds if seeds else [args.seed])]
        if len(set(numbers)) != len(numbers):
            raise MemtuiError("--seeds: each PolyPythia seed once, and not --seed's again.")
        prefixes = [polypythia_maps(args.index_maps, s) for s in numbers]
        maps, seeds, names = prefixes[0], prefixes[1:], [f"seed{s}" for s in numbers]
    steps, train_steps = args.steps, args.train_steps
    if args.preset == "polypythia":
        train_steps = train_steps or preset["train_steps"]
        if steps is None:  # Pythia's checkpoints: 0, 1, 2, 4, ..., 512, then every 1000 steps
            steps = [0, *(2**i for i in range(10)), *range(1000, train_steps + 1, 1000)]
    elif args.preset == "hubble" and steps is None:
        if train_steps is None:
            raise MemtuiError("--preset hubble: give --train-steps (the run's last step) or --steps.")
        steps = hubble_checkpoints(train_steps)
    common["steps"] = steps
    return build_from_neox(
        args.out,
        args.tokens,
        maps,
        batch_size=batch,
        seq_len=args.seq_len or preset.get("seq_len"),
        macro=args.macro,
        validation=args.validation,
        train_steps=train_steps,
        seeds=seeds or None,
        seed_names=names if seeds else None,
        perturbation_info=args.perturbation_info,
        examples=args.examples,
        cache=args.cache,
        attrs={"preset": args.preset} if args.preset else None,
        **common,
    )


def _list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _seed_number(value) -> int:
    text = str(value).removeprefix("seed")
    if not text.isdigit():
        raise MemtuiError(f"--seeds with --preset polypythia takes seed numbers 0..9, not '{value}'.")
    return int(text)
