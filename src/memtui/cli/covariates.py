"""`memtui covariates`: compute per-instance covariates (length, compressibility, domain, duplicates and n-gram
novelty in a training corpus, a table's columns) and store them in the panel."""

from __future__ import annotations

from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.text import clean

SUMMARY = "compute per-instance covariates (length, zlib, domain, corpus duplicates, a table) into the panel"
DESCRIPTION = """Compute per-instance covariates and store them in the panel (instances/covariates, docs/covariates.md).

From the panel's tokens: length (non-padding tokens) and zlib (compression ratio of the row's token ids as uint16
bytes, uint32 where the vocabulary needs it). From its build: source (domain) and duplicates (Hubble's inserted
copies), where recorded. With --corpus (the training corpus as Megatron PREFIX.idx/.bin or flat token files, counted
with EleutherAI's tokengrams): duplicates_exact (occurrences of the row's whole sequence) and ngram13_seen (share of
its 13-grams that occur in the corpus outside the row's own copy). With --from: every column of the table but `id`,
joined on the instance id."""


def add_arguments(p) -> None:
    p.add_argument("panel", type=Path, help="the panel file to add covariates to")
    p.add_argument("--corpus", action="append", default=[], metavar="PREFIX",
                   help="training corpus: a Megatron dataset PREFIX (PREFIX.idx + PREFIX.bin) or a flat token file; "
                        "repeat for several files")  # fmt: skip
    p.add_argument("--corpus-dtype", choices=("uint16", "uint32", "int32"), default=None,
                   help="token type of flat corpus files (default uint16; a Megatron .idx says its own)")  # fmt: skip
    p.add_argument("--index-dir", type=Path, default=None,
                   help="where tokengrams' suffix tables are kept (default: beside each corpus file)")  # fmt: skip
    p.add_argument("--from", dest="table", type=Path, default=None, metavar="TABLE",
                   help="a parquet or CSV table: column `id` (instance id) and one column per covariate")  # fmt: skip
    p.add_argument("--only", default=None, metavar="NAMES", help="comma-separated covariates to compute and store")
    p.add_argument("--replace", action="store_true", help="overwrite covariates of the same name already stored")
    p.add_argument("--dry-run", action="store_true", help="compute and print them, write nothing")


def run(args) -> int:
    import sys

    from memtui.extract.covariates import compute_covariates, store_covariates
    from memtui.panel.covariates import constant_value, describe_covariate
    from memtui.panel.hdf5 import read_panel

    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only is not None else None
    if only is not None and not only:
        raise MemtuiError("--only names no covariate.")
    panel = read_panel(args.panel)
    if not args.dry_run and not args.replace:  # refused before any corpus is indexed or counted
        clash = [name for name in (only or ()) if name in panel.covariates]
        if clash:
            raise MemtuiError(f"{args.panel} already has the covariate {clash[0]}; pass --replace to overwrite.")

    def log(line: str) -> None:
        print(clean(line), file=sys.stderr)

    columns = compute_covariates(panel, corpus=args.corpus, table=args.table, only=only,
                                 corpus_dtype=args.corpus_dtype, index_dir=args.index_dir, log=log)  # fmt: skip
    if not args.dry_run:
        store_covariates(args.panel, columns, replace=args.replace)
    pad = max(len(name) for name in columns) + 2
    for name, values in columns.items():
        kind, summary = describe_covariate(values)
        print(f"{name:<{pad}}{kind:<13}{summary}")
    for name, values in columns.items():
        if (value := constant_value(values)) is not None:
            print(f"warning: covariate {name} is constant ({value} for every instance with a value): --covariates "
                  "cannot adjust for it and --by cannot split by it", file=sys.stderr)  # fmt: skip
    verb = "computed (not written: --dry-run)" if args.dry_run else f"stored in {clean(args.panel)}"
    print(f"{len(columns)} covariate{'s' if len(columns) != 1 else ''} {verb}")
    return 0
