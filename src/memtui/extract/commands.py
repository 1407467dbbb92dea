"""CLI subcommands for extraction: ``extract``, ``status``, ``build``, ``demo``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from memtui.errors import MemtuiError

from .options import ExtractOptions


def register(sub) -> None:
    """Add the extraction subcommands to the `memtui` parser."""
    p = sub.add_parser(
        "extract",
        help="score every checkpoint of a model on a panel's instances (background, resumable, many GPUs or SLURM)",
        description="Score checkpoints into PANEL. Starts detached workers (they survive the terminal) unless "
        "--foreground: one per GPU with --gpus, N with --workers, or a SLURM job array with --slurm. "
        "A rerun skips what is finished.",
    )
    p.add_argument("panel", type=Path)
    ExtractOptions.add_worker_arguments(p)
    ExtractOptions.add_launch_arguments(p)
    p.add_argument("--foreground", action="store_true", help="one worker in this terminal, with a progress bar")
    p.add_argument("--cancel", action="store_true", help="stop every worker of PANEL (resumable)")
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("status", help="progress of the extraction of a panel: every worker, total and ETA")
    p.add_argument("panel", type=Path)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the workers stop")
    p.add_argument("--json", action="store_true", help="print the raw progress record")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "build",
        help="build a panel to extract into, from a Pythia-layout memmap or a token-id file",
        description="Either --memmap (rows of --seq-len uint16 tokens in training order) with --validation, "
        "sampled per macro-batch like Lesci et al.; or --tokens (npy/npz/parquet) with a treatment-step column.",
    )
    p.add_argument("out", type=Path)
    p.add_argument("--memmap", type=Path, help="Pythia-layout token file (.bin uint16 or .npy)")
    p.add_argument("--validation", type=Path, help="never-trained validation token ids (.npy, rows x length)")
    p.add_argument("--tokens", type=Path, help="token ids with treatment steps (.npz, .parquet, or .npy)")
    p.add_argument("--treatment-column", default="treatment_step")
    p.add_argument("--tokens-column", default="tokens")
    p.add_argument("--treatment-file", type=Path, help="treatment steps (.npy) for an .npy token matrix")
    p.add_argument("--steps", help="the panel's checkpoint steps (default: every macro-batch / every treatment step)")
    p.add_argument("--batch-size", type=int, default=1024, help="rows per training step (memmap)")
    p.add_argument("--macro", type=int, default=1000, help="steps per macro-batch = checkpoint interval (memmap)")
    p.add_argument("--batches", "-k", type=int, default=10, help="batches sampled per macro-batch")
    p.add_argument("--rows", "-m", type=int, default=10, help="rows sampled per batch")
    p.add_argument("--n-validation", type=int, default=None, help="validation rows to sample (default: all)")
    p.add_argument("--seq-len", type=int, default=2049)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser(
        "demo",
        help="train a tiny GPT-NeoX on CPU and make a real panel from its checkpoints (runs detached)",
        description="One pass over a corpus derived from the Unicode 3.2 database, checkpoints every few steps, "
        "then build and extract a panel. Runs as a detached job (closing the terminal does not stop it; its "
        "temporary files are removed when it ends) and follows its log, OUT.demo.log; ctrl-c stops following. "
        "The full demo takes a few minutes on 2 idle cores (much longer where other processes hold the cores); "
        "--small about 1. --suite OUT_DIR trains four sizes on the same rows with Pythia's schedule shape, "
        "extracts each into OUT_DIR/MODEL.h5 and writes OUT_DIR/report.md, the paper's findings in miniature.",
    )
    p.add_argument("out", type=Path, nargs="?", default=None,
                   help="panel to write [tiny-gptneox.h5]; with --suite the folder [memtui-suite]")  # fmt: skip
    p.add_argument("--suite", action="store_true", help="a family of model sizes, their panels and a findings report")
    p.add_argument("--small", action="store_true", help="the ~1 minute version used by the tests")
    p.add_argument("--keep", type=Path, default=None, help="keep the corpus memmap and checkpoints in this folder")
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    p.add_argument("--foreground", action="store_true", help="run in this process (stops with the terminal)")
    p.set_defaults(func=cmd_demo)


def cmd_extract(args) -> int:
    from . import jobs

    if args.cancel:
        if jobs.cancel(args.panel):
            print(f"asked every worker of {args.panel} to stop; each stops after its current batch (resumable)")
            return 0
        print(f"no extraction is running on {args.panel} (no worker holds its lock); nothing was signalled")
        return 1
    options = ExtractOptions.from_args(args).validate()
    if args.foreground:
        if options.n_workers > 1 or options.slurm is not None:
            raise MemtuiError("--foreground runs one worker in this terminal; drop --workers/--gpus/--slurm.")
        return _foreground(args.panel, options)
    if options.slurm is not None:
        return _slurm(args, options)
    panel = args.panel
    pids = jobs.launch(panel, options)
    log = jobs.log_path(panel.resolve())
    where = f" on GPUs {', '.join(map(str, options.gpus))}" if options.gpus is not None else ""
    print(f"extraction started in the background: {len(pids)} worker(s){where} (pid {', '.join(map(str, pids))}); "
          "closing this terminal does not stop them.")  # fmt: skip
    print(f"  follow:  memtui status {panel} --follow    (log: {log})")
    print(f"  stop:    memtui extract {panel} --cancel    (a rerun resumes)")
    return 0


def _foreground(panel: Path, options: ExtractOptions) -> int:
    from . import jobs
    from .worker import run

    jobs.prepare(panel, options)  # the launcher's checks: a live run, links beside the panel, a stale cancel flag
    tty = sys.stderr.isatty()

    def on_update(p: dict) -> None:
        if tty and p.get("state") == "running":
            sys.stderr.write("\r" + _bar(p) + "\033[K")
            sys.stderr.flush()

    def log(msg: str) -> None:
        if tty:
            sys.stderr.write("\r\033[K")
        print(msg, flush=True)

    state = run(panel, options.with_model(jobs._resolve_model(options.model)), on_update=on_update, log=log)
    if tty:
        sys.stderr.write("\r\033[K")
    return 0 if state == "done" else 130


def _slurm(args, options: ExtractOptions) -> int:
    from memtui.panel import read_panel

    from . import jobs, slurm

    panel, options = jobs.prepare(args.panel, options)
    if args.dry_run:
        print(slurm.dry_run_script(panel, options), end="")
        return 0
    job = slurm.submit(panel, options, read_panel(panel).steps)
    print(f"submitted SLURM job array {job}: {options.workers} task(s), one worker each; requeued tasks resume.")
    print(f"  follow:  memtui status {args.panel} --follow")
    print(f"  stop:    memtui extract {args.panel} --cancel    (scancel; a rerun resumes)")
    return 0


def _bar(p: dict, width: int = 24) -> str:
    from .progress import fmt_duration

    n, total = p.get("instances_done") or 0, max(1, p.get("instances_total") or 1)
    filled = int(width * n / total)
    bar = "#" * filled + "-" * (width - filled)
    rate = f"{p['tokens_per_s']:,.0f} tok/s" if p.get("tokens_per_s") else ""
    return (
        f"[{p.get('k') or 0}/{p.get('K') or 0}] step {p.get('checkpoint')} [{bar}] {n}/{total} {rate} "
        f"ETA {fmt_duration(p.get('eta_s'))}"
    )


def cmd_status(args) -> int:
    from memtui.panel import read_done

    from . import jobs
    from .progress import describe, describe_worker

    while True:
        steps, done = read_done(args.panel)
        progress = jobs.read_progress(args.panel)
        if args.json:
            print(json.dumps(progress, indent=1))
            return 0
        summary = f"{int(done.sum())}/{len(steps)} checkpoints extracted"
        if progress is None:
            print(f"{args.panel}: {summary}; no extraction has run on it (start one with `memtui extract`).")
            return 0
        line = f"{args.panel}: {describe(progress)}; {summary}"
        workers = progress.get("workers") or []
        if not args.follow or progress.get("state") != "running":
            print(line)
            for w in workers:
                print(f"  {describe_worker(w)}")
            print(f"  log {progress.get('log')}")
            for w in progress.get("warnings") or []:
                print(f"  warning: {w}")
            if progress.get("state") == "unreadable":
                print(f"  a worker record in {jobs.work_dir(args.panel)}/workers is not a progress record; a rerun of "
                      "`memtui extract` replaces it")  # fmt: skip
            if progress.get("state") in ("stale", "cancelled", "failed"):
                print(f"  rerun `memtui extract {args.panel} --model {progress.get('model') or 'MODEL'}` to resume")
            return 0 if progress.get("state") != "failed" else 1
        print(line + f" ({progress.get('n_running')} running)", flush=True)
        time.sleep(2)


def cmd_build(args) -> int:
    from memtui.errors import MemtuiError

    from .build import build_from_memmap, build_from_tokens

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
    from memtui.panel import read_panel

    panel = read_panel(out)
    n_val = int(panel.never_treated.sum())
    print(
        f"built {out}: {panel.n_instances} instances ({panel.n_instances - n_val} treated, {n_val} validation), "
        f"{panel.n_checkpoints} checkpoints {panel.steps[0]}..{panel.steps[-1]}; "
        f"next: memtui extract {out} --model MODEL"
    )
    return 0


def cmd_demo(args) -> int:
    if args.out is None:
        args.out = Path("memtui-suite" if args.suite else "tiny-gptneox.h5")
    if args.foreground:
        keep = args.keep is not None
        if args.suite:
            from .demo_suite import SuiteConfig, make_suite

            cfg = SuiteConfig.small() if args.small else SuiteConfig()
            report = make_suite(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force)
            print(f"read {report}; open the suite with `memtui {args.out}/*.h5`")
            return 0
        from .demo import DemoConfig, make_demo

        cfg = DemoConfig.small() if args.small else DemoConfig()
        out = make_demo(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force)
        print(f"open it with `memtui {out}`; estimate with `memtui estimate {out}`")
        return 0
    from . import demo_job

    job = demo_job.start(args.out, small=args.small, keep=args.keep, force=args.force, suite=args.suite)
    print(f"the demo runs in the background (pid {job.pid}); closing this terminal does not stop it. "
          f"Following {demo_job.log_path(args.out.resolve())} (ctrl-c stops following):", flush=True)  # fmt: skip
    return demo_job.follow(args.out, job, write=lambda line: print(line, flush=True))
