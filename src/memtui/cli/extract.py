"""`memtui extract`: score every checkpoint of a model on a panel's instances (background, resumable, many GPUs
or SLURM)."""

from __future__ import annotations

import sys
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.extract.options import ExtractOptions

SUMMARY = "score every checkpoint of a model on a panel's instances (background, resumable, many GPUs or SLURM)"
DESCRIPTION = (
    "Score checkpoints into PANEL. Starts detached workers (they survive the terminal) unless "
    "--foreground: one per GPU with --gpus, N with --workers, or a SLURM job array with --slurm. "
    "A rerun skips what is finished. --dry-run checks everything and prints the plan: it starts nothing and "
    "writes nothing."
)


def add_arguments(p) -> None:
    p.add_argument("panel", type=Path, help="the panel file to extract into (made by `memtui build`)")
    ExtractOptions.add_worker_arguments(p)
    ExtractOptions.add_launch_arguments(p)
    p.add_argument("--foreground", action="store_true", help="one worker in this terminal, with a progress bar")
    p.add_argument("--cancel", action="store_true", help="stop every worker of PANEL (resumable)")


def run(args) -> int:
    from memtui.extract import jobs

    _refuse_what_is_not_honoured(args)
    if args.cancel:
        notes: list[str] = []
        stopped = jobs.cancel(args.panel, notes=notes)
        for note in notes:
            print(f"memtui: {clean(note, 400)}", file=sys.stderr)
        if stopped:
            print(f"asked every worker of {args.panel} to stop; each stops after its current batch (resumable)")
            return 0
        print(f"no extraction is running on {args.panel} (no worker holds its lock); nothing was signalled")
        return 1
    options = ExtractOptions.from_args(args).validate()
    if args.foreground and (options.n_workers > 1 or options.gpus is not None or options.slurm is not None):
        raise MemtuiError(
            "--foreground runs one worker in this terminal; drop --workers/--gpus/--slurm (--device cuda:N picks "
            "its GPU)."
        )
    if options.token_scores is not None and not args.dry_run:  # the dry run's plan says it among the rest
        from memtui.extract.token_scores import launch_estimate

        print(launch_estimate(args.panel, options), flush=True)
    if options.slurm is not None:
        return _slurm(args, options)
    if args.dry_run:
        return _dry_run(args.panel, options, "foreground" if args.foreground else "detached")
    if args.foreground:
        return _foreground(args.panel, options)
    panel = args.panel
    pids = jobs.launch(panel, options)
    log = jobs.log_path(panel.resolve())
    where = f" on GPUs {', '.join(map(str, options.gpus))}" if options.gpus is not None else ""
    print(f"extraction started in the background: {len(pids)} worker(s){where} (pid {', '.join(map(str, pids))}); "
          "closing this terminal does not stop them.")  # fmt: skip
    print(f"  follow:  memtui status {panel} --follow    (log: {log})")
    print(f"  stop:    memtui extract {panel} --cancel    (a rerun resumes)")
    return 0


# options only a SLURM submission reads: given without --slurm they would be dropped in silence
_SLURM_ONLY = {"partition": "--partition", "time": "--time", "account": "--account", "gpus_per_task": "--gpus-per-task",
               "cpus_per_task": "--cpus-per-task", "mem": "--mem", "slurm_extra": "--slurm-extra"}  # fmt: skip


def _given(args) -> list[str]:
    """The options given on the command line (those whose value differs from the parser's default), as typed."""
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings}
    return [flags[dest] for dest, default in vars(parser.parse_args(["x"])).items()
            if dest in flags and dest != "help" and getattr(args, dest, default) != default]  # fmt: skip


def _refuse_what_is_not_honoured(args) -> None:
    """Every option is honoured or refused: a combination in which one would be dropped in silence is refused here,
    before anything is checked, started or written."""
    given = _given(args)
    if args.cancel:
        others = [flag for flag in given if flag != "--cancel"]
        if others:
            raise MemtuiError(
                f"--cancel stops every worker of {args.panel} and takes no other option; drop {', '.join(others)}."
            )
        return
    if not args.slurm:
        slurm_only = [flag for dest, flag in _SLURM_ONLY.items() if flag in given]
        if slurm_only:
            raise MemtuiError(
                f"{', '.join(slurm_only)} {'is a SLURM option' if len(slurm_only) == 1 else 'are SLURM options'}: "
                "add --slurm to submit a job array, or drop "
                f"{'it' if len(slurm_only) == 1 else 'them'} to run on this machine."
            )
    if args.gpus is not None and args.workers is not None:
        raise MemtuiError("--gpus starts one worker per listed GPU; drop --workers (or drop --gpus and give --device).")
    if args.slurm and args.foreground:
        raise MemtuiError("--foreground runs one worker in this terminal; --slurm submits a job array: drop one.")


def _dry_run(panel: Path, options: ExtractOptions, mode: str) -> int:
    """Every check of the launch, then its plan; nothing started, nothing written."""
    from memtui.extract import dryrun, jobs

    panel_path, options = jobs.check(panel, options)
    print("\n".join(dryrun.plan_lines(panel_path, options, mode=mode)))
    return 0


def _foreground(panel: Path, options: ExtractOptions) -> int:
    from memtui.extract import jobs
    from memtui.extract.worker import run

    panel_path, options = jobs.check(panel, options)  # a live run, links beside the panel, the model, the device
    tty = sys.stderr.isatty()

    def on_update(p: dict) -> None:
        if tty and p.get("state") == "running":
            sys.stderr.write("\r" + _bar(p) + "\033[K")
            sys.stderr.flush()

    def log(msg: str) -> None:
        if tty:
            sys.stderr.write("\r\033[K")
        print(msg, flush=True)

    with jobs.launch_lock(panel_path):  # held for the whole run: no second launch starts beside this one
        jobs._refuse_if_live(panel_path)
        jobs.begin_run(panel_path)
        state = run(panel, options, on_update=on_update, log=log)
    if tty:
        sys.stderr.write("\r\033[K")
    return 0 if state == "done" else 130


def _slurm(args, options: ExtractOptions) -> int:
    from memtui.extract import jobs, slurm

    if args.dry_run:  # checks only: a dry run writes nothing and leaves the previous run's records as they are
        from memtui.extract import dryrun
        from memtui.panel.hdf5 import read_panel

        panel, options = jobs.check(args.panel, options, local=False)
        slurm.check_cached(options, read_panel(panel).steps)  # what the submission would refuse, refused now
        script = slurm.dry_run_script(panel, options)
        # the plan on stderr: stdout stays the job script, to save and give to sbatch
        print("\n".join(dryrun.plan_lines(panel, options, mode="slurm")), file=sys.stderr)
        print(script, end="")
        return 0
    panel, job = jobs.submit_slurm(args.panel, options)
    print(f"submitted SLURM job array {job}: {options.workers} task(s), one worker each; requeued tasks resume.")
    print(f"  follow:  memtui status {args.panel} --follow")
    print(f"  stop:    memtui extract {args.panel} --cancel    (scancel; a rerun resumes)")
    return 0


def _bar(p: dict, width: int = 24) -> str:
    from memtui.extract.progress import fmt_duration

    n, total = p.get("instances_done") or 0, max(1, p.get("instances_total") or 1)
    filled = int(width * n / total)
    bar = "#" * filled + "-" * (width - filled)
    rate = f"{p['tokens_per_s']:,.0f} tok/s" if p.get("tokens_per_s") else ""
    return (
        f"[{p.get('k') or 0}/{p.get('K') or 0}] step {p.get('checkpoint')} [{bar}] {n}/{total} {rate} "
        f"ETA {fmt_duration(p.get('eta_s'))}"
    )
