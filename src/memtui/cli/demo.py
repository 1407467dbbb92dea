"""`memtui demo`: train a tiny GPT-NeoX on CPU and make a real panel from its checkpoints (runs detached)."""

from __future__ import annotations

from pathlib import Path

# Measured on a 2-core machine (docs/extraction.md, "The demo"): trained in 18 s and extracted in ~100 s on idle cores;
# 6 min of training and 13-22 min of extraction where other processes held the cores (torch's threads wait on each
# other). README's demo line quotes this phrase.
FULL_DEMO_TIME = "about 2 min on 2 idle cores, 20-30 min where other processes share them"

SUMMARY = "train a tiny GPT-NeoX on CPU and make a real panel from its checkpoints (runs detached)"
DESCRIPTION = (
    "One pass over a corpus derived from the Unicode 3.2 database, checkpoints every few steps, "
    "then build and extract a panel. Runs as a detached job (closing the terminal does not stop it; its "
    "temporary files are removed when it ends) and follows its log, OUT.demo.log; ctrl-c stops following. "
    f"The full demo takes {FULL_DEMO_TIME}; --small about 1 minute on idle cores and 5-7 minutes where other "
    "processes share them (measured at load 6-10). "
    "--suite OUT_DIR trains four sizes on the same rows with Pythia's schedule shape, "
    "extracts each into OUT_DIR/MODEL.h5 and writes OUT_DIR/report.md, the paper's findings in miniature. "
    "--inserted OUT_DIR trains a standard and a perturbed model (canaries inserted at known steps, doses 1-16 copies, "
    "early / middle / late), scores the canaries with both and writes OUT_DIR/report.md: memtui's estimates against "
    "the counterfactual model's truth. "
    "--seeds OUT_DIR trains one model under two data orders (megatron-core's index maps), builds and extracts the seed "
    "suite and writes its pooled estimate to OUT_DIR/report.md."
)


def add_arguments(p) -> None:
    p.add_argument(
        "out",
        type=Path,
        nargs="?",
        default=None,
        help="panel to write; with --suite or --inserted, the folder [default: tiny-gptneox.h5; with --suite, "
        "memtui-suite; with --inserted, memtui-inserted]",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--suite", action="store_true", help="a family of model sizes, their panels and a findings report"
    )
    mode.add_argument(
        "--inserted",
        action="store_true",
        help="a standard and a perturbed model (canaries inserted on purpose) and a report of estimates against truth",
    )
    mode.add_argument(
        "--seeds",
        action="store_true",
        help="one model under two data orders (megatron-core's): a seed suite, its pooled estimate and "
        "OUT_DIR/report.md [folder default: memtui-seeds]; runs in this process, a few minutes",
    )
    p.add_argument(
        "--small",
        action="store_true",
        help="the small version the tests use (about 1 minute on idle cores, 5-7 minutes under load; --suite --small: "
        "12-20 s idle, 2-3 minutes under load)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the corpus memmap and checkpoints in this folder")
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    p.add_argument("--foreground", action="store_true", help="run in this process (stops with the terminal)")


def run(args) -> int:
    from memtui.demo.workdir import check_keep

    check_keep(args.keep)  # at launch, before any output folder, log or background job exists
    if args.seeds:
        from memtui.demo.seeds import SeedsConfig, make_seeds

        cfg = SeedsConfig.small() if args.small else SeedsConfig()
        out = Path("memtui-seeds") if args.out is None else args.out
        made = make_seeds(out, cfg, workdir=args.keep, keep=args.keep is not None, overwrite=args.force)
        print(f"read {made.report}; open the suite with `memtui compare {' '.join(map(str, made.panels))} --pooled`")
        return 0
    if args.out is None:
        args.out = Path("memtui-suite" if args.suite else "memtui-inserted" if args.inserted else "tiny-gptneox.h5")
    if args.foreground:
        keep = args.keep is not None
        if args.inserted:
            from memtui.demo.inserted import InsertedConfig, make_inserted

            cfg = InsertedConfig.small() if args.small else InsertedConfig()
            report = make_inserted(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force)
            print(f"read {report}; the panels are {args.out}/perturbed.h5 and {args.out}/standard.h5")
            return 0
        if args.suite:
            from memtui.demo.family import SuiteConfig, make_suite

            cfg = SuiteConfig.small() if args.small else SuiteConfig()
            report = make_suite(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force)
            print(f"read {report}; open the suite with `memtui {args.out}/*.h5`")
            return 0
        from memtui.demo.train import DemoConfig, make_demo

        cfg = DemoConfig.small() if args.small else DemoConfig()
        out = make_demo(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force)
        print(f"open it with `memtui {out}`; estimate with `memtui estimate {out}`")
        return 0
    from memtui.demo import job as demo_job

    job = demo_job.start(
        args.out, small=args.small, keep=args.keep, force=args.force, suite=args.suite, inserted=args.inserted
    )
    print(f"the demo runs in the background (pid {job.pid}); closing this terminal does not stop it. "
          f"Following {demo_job.log_path(args.out.resolve())} (ctrl-c stops following):", flush=True)  # fmt: skip
    return demo_job.follow(args.out, job, write=lambda line: print(line, flush=True))
