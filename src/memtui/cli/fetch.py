"""`memtui fetch`: download a hub model's checkpoint revisions into the Hugging Face cache (for offline compute
nodes)."""

from __future__ import annotations

SUMMARY = "download a hub model's checkpoint revisions into the Hugging Face cache (for offline compute nodes)"
DESCRIPTION = (
    "Pre-stage revisions (config, weights, generation config) into the Hugging Face cache "
    "(HF_HOME / HF_HUB_CACHE; HF_TOKEN for gated models). Resumable: complete revisions are skipped. "
    "Compute nodes then run `HF_HUB_OFFLINE=1 memtui extract ...`."
)


def add_arguments(p) -> None:
    p.add_argument("--model", required=True, help="Hugging Face repo id, e.g. EleutherAI/pythia-1.4b-deduped")
    p.add_argument("--checkpoints", required=True, help="START:STOP:STEP (inclusive) or a comma list of steps")
    p.add_argument("--revision-template", default="step{step}", help="Hugging Face revision name of a step")
    p.add_argument("--workers", type=int, default=None, help="revisions downloaded in parallel (default: 4)")
    p.add_argument("--dry-run", action="store_true", help="list missing revisions and their sizes; download nothing")


def run(args) -> int:
    from memtui.core.errors import MemtuiError
    from memtui.extract.fetch import fetch_from_args

    if args.dry_run and args.workers is not None:  # honoured or refused: a dry run downloads nothing in parallel
        raise MemtuiError("--workers sets how many revisions download at once; a --dry-run downloads none: drop one.")
    if args.workers is None:
        args.workers = 4
    return fetch_from_args(args)
