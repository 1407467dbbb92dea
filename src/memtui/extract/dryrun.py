"""What a launch of ``memtui extract`` would do, in words, without doing any of it (``--dry-run``).

A dry run makes every check the launch makes (:func:`memtui.extract.jobs.check`: the panel, the model and its
checkpoints, the device, the space, a live run) and then says what the launch would start and write: how many
workers and where, which checkpoints and how many units, and every file it would write. It starts no process,
creates no folder and writes no file: not the work folder, not the log, not the panel (whose bytes and modification
time stay as they were), and asks SLURM nothing.
"""

from __future__ import annotations

from pathlib import Path

from memtui.extract.options import ExtractOptions


def plan_lines(panel_path: Path, options: ExtractOptions, *, mode: str) -> list[str]:
    """The plan of a checked launch (``panel_path`` and ``options`` as :func:`jobs.check` returns them). ``mode``:
    ``foreground`` (one worker in this terminal), ``detached`` (workers on this machine) or ``slurm`` (an array)."""
    from memtui.extract import token_scores
    from memtui.extract.checkpoints import Source, checkpoint_lines, parse_checkpoints, plan_steps
    from memtui.extract.progress import log_path
    from memtui.extract.units import plan_units, work_dir
    from memtui.panel.hdf5 import read_panel

    panel = read_panel(panel_path)
    source = Source.open(options.model, options.revision_template)
    rows = token_scores.check(panel_path, panel, options.token_scores)  # the per-token subset, if any
    done = ~token_scores.pending(panel_path, panel, rows)  # a checkpoint is done with its per-token scores too
    steps = plan_steps(panel.steps, done, parse_checkpoints(options.checkpoints), source)
    units = plan_units(steps, panel.steps, panel.n_instances, options.split)
    n = options.n_workers
    lines = ["dry run: nothing was started and nothing was written. `memtui extract` with these options would:"]
    lines.append(f"  workers:     {_workers(options, mode)}")
    kind = "local checkpoint folders" if source.local else "Hugging Face hub"
    lines.append(f"  model:       {options.model} ({kind})")
    done = int(panel.done.sum())
    shown = _steps(steps)
    lines.append(f"  checkpoints: {len(steps)} to score ({shown}); {done} of {panel.n_checkpoints} already extracted")
    per = f", each cut into {options.split} instance ranges" if options.split > 1 else ""
    lines.append(f"  units:       {len(units)} (one per checkpoint{per}) of {panel.n_instances} instances")
    if steps and n > len(units):
        lines.append(f"  note:        {n} workers for {len(units)} unit(s): {n - len(units)} would have nothing to do "
                     f"(--split K cuts each checkpoint into K units)")  # fmt: skip
    lines.append(f"  scoring:     dtype {options.dtype}, batch size {options.batch_size}, batch-invariant "
                 f"{options.batch_invariant}" + (f", chunk {options.chunk}" if options.chunk else "")
                 + (f", extractable {options.extractable}" if options.extractable else ""))  # fmt: skip
    lines += _scoring_lines(panel, options, mode)
    if rows is not None:
        lines.append(f"  token scores: {token_scores.estimate_line(panel, rows, len(steps))}")
    if source.local is None and steps:
        lines.append(f"  revisions:   {_template(options)} ({_hub_note(options, steps, mode)})")
    lines += [f"  checkpoint list: {line}" for line in checkpoint_lines(source, panel.steps)]  # gaps, averages
    if not steps:
        lines.append("  nothing to score: every requested checkpoint is already extracted (a run would only commit "
                     "scored parts left in the work folder)")  # fmt: skip
    work, log = work_dir(panel_path), log_path(panel_path)
    grows = "in place: it never grows" if rows is None else "in place; it grows only by the per-token scores"
    lines.append(f"  would write: the {len(steps)} checkpoint column(s) into {panel_path} ({grows}); "
                 f"claims, parts and worker records in {work}/; the log {log}")  # fmt: skip
    if mode == "slurm":
        lines.append(f"  SLURM:       submitit's files in {work}/slurm/; the job script follows")
    return lines


def _scoring_lines(panel, options: ExtractOptions, mode: str) -> list[str]:
    """How this launch would score (on this machine; SLURM's nodes decide for themselves), how the panel's completed
    checkpoints were scored, and the warning a worker would give before mixing the two."""
    from memtui.panel import scoring

    lines = []
    way = None
    if mode != "slurm":
        from memtui.extract.scoring import resolve_device, resolve_dtype, scoring_way

        dev = resolve_device(options.device)
        way = scoring_way(dev, resolve_dtype(options.dtype, dev), options.batch_invariant)
        lines.append(f"  scored as:   {way}")
    if seen := scoring.counts(panel.scorings, panel.done):
        lines.append(f"  scored so far: {scoring.listed(seen, 4)}")
    if way and (warning := scoring.resume_warning(panel.scorings, panel.done, way)):
        lines.append(f"  {warning}")
    return lines


def _template(options: ExtractOptions) -> str:
    from memtui.orders.revisions import manifest_of

    manifest = manifest_of(options.revision_template)
    return options.revision_template if manifest is None else f"as listed in {manifest.source}"


def _workers(options: ExtractOptions, mode: str) -> str:
    if mode == "foreground":
        return f"1 in this terminal, device {options.device}"
    if mode == "slurm":
        slurm = options.slurm
        gpus = slurm.gpus_for(options.device) if slurm is not None else 1
        where = f"partition {slurm.partition}" if slurm is not None and slurm.partition else "the default partition"
        return (f"a SLURM job array of {options.workers} task(s), one worker each, on {where}, {gpus} GPU(s) per "
                f"task, time limit {slurm.time if slurm else '4:00:00'} per task")  # fmt: skip
    if options.gpus is not None:
        return f"{len(options.gpus)} detached, one per GPU ({', '.join(f'GPU {g}' for g in options.gpus)})"
    from memtui.extract.jobs import _device_label

    return f"{options.workers} detached (they survive the terminal), device {_device_label(None, options)}"


def _steps(steps: list[int], limit: int = 8) -> str:
    if not steps:
        return "none"
    shown = ", ".join(map(str, steps[:limit]))
    return f"steps {shown}" + (f" … {steps[-1]}" if len(steps) > limit else "")


def _hub_note(options: ExtractOptions, steps: list[int], mode: str) -> str:
    from memtui.extract.fetch import missing_revisions

    missing = missing_revisions(options.model, steps, options.revision_template)
    if not missing:
        return f"all {len(steps)} in the Hugging Face cache"
    if mode == "slurm":
        return f"{len(missing)} not in the Hugging Face cache"  # the launch's own check refuses this first
    return f"{len(missing)} of {len(steps)} not in the Hugging Face cache: the workers would download them"
