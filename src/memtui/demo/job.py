"""`memtui demo` as a detached job: training, building and extraction survive the terminal, and clean up after
themselves wherever the terminal went.

The CLI starts ``python -m memtui.demo.job OUT ...`` in its own session with its output in ``OUT.demo.log``,
then follows that log; ctrl-c stops following, not the demo. The job's temporary folder (corpus memmap and
checkpoints) is removed by the job itself when it ends, however the CLI ended.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from memtui.core.errors import MemtuiError
from memtui.core.files import refuse_existing
from memtui.core.text import clean
from memtui.extract.locking import open_beside


def log_path(out: Path) -> Path:
    return out.with_name(out.name + ".demo.log")


def start(
    out: Path, *, small: bool, keep: Path | None, force: bool, suite: bool = False, inserted: bool = False
) -> subprocess.Popen:
    """Start the detached demo job (its own session: the terminal closing does not reach it); with ``suite`` or
    ``inserted``, OUT is the folder."""
    out = out.resolve()
    if inserted:
        from memtui.demo.inserted import check_out_dir as check_inserted

        check_inserted(out, force)  # refused here, not in the log
    elif suite:
        from memtui.demo.family import SuiteConfig, check_out_dir

        cfg = SuiteConfig.small() if small else SuiteConfig()
        check_out_dir(out, [name for name, _, _ in cfg.models()], force)  # refused here, not in the log
    else:
        refuse_existing(out, force)
    if not out.parent.is_dir():
        raise MemtuiError(f"cannot write {out}: {out.parent} is not an existing folder.")
    cmd = [sys.executable, "-m", "memtui.demo.job", str(out)]
    cmd += ["--small"] * small + ["--force"] * force + (["--keep", str(keep.resolve())] if keep else [])
    cmd += ["--suite"] * suite + ["--inserted"] * inserted
    fd = open_beside(log_path(out), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, cwd=str(out.parent),
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))  # fmt: skip
    except OSError as exc:
        raise MemtuiError(f"cannot start the demo: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    return proc


def follow(out: Path, job: subprocess.Popen, write=print) -> int:
    """Print the job's log as it grows until the job ends; its exit status (0 done, 2 refused or failed), or 130 on
    ctrl-c (the job goes on)."""
    path = log_path(out.resolve())
    offset = 0
    try:
        while True:
            status = job.poll()
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
                offset += len(chunk)
                for line in chunk.decode("utf-8", "replace").splitlines():
                    write(clean(line, None))
            if status is not None:
                return 0 if status == 0 else 2
            time.sleep(0.5)
    except KeyboardInterrupt:
        write(f"stopped following; the demo goes on in the background (pid {job.pid}): tail -f {path}")
        return 130


def main(argv: list[str] | None = None) -> int:
    from memtui.demo.train import DemoConfig, make_demo

    p = argparse.ArgumentParser(prog="memtui-demo-job")
    p.add_argument("out", type=Path)
    p.add_argument("--small", action="store_true")
    p.add_argument("--keep", type=Path, default=None)
    p.add_argument("--force", action="store_true")
    p.add_argument("--suite", action="store_true")
    p.add_argument("--inserted", action="store_true")
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        with contextlib.suppress(OSError):
            print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    keep = args.keep is not None
    try:
        if args.inserted:
            from memtui.demo.inserted import InsertedConfig, make_inserted

            cfg = InsertedConfig.small() if args.small else InsertedConfig()
            report = make_inserted(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force, log=log)
            log(f"read {report}; the panels are {args.out}/perturbed.h5 and {args.out}/standard.h5")
            return 0
        if args.suite:
            from memtui.demo.family import SuiteConfig, make_suite

            cfg = SuiteConfig.small() if args.small else SuiteConfig()
            report = make_suite(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force, log=log)
            log(f"read {report}; open the suite with `memtui {args.out}/*.h5`")
            return 0
        cfg = DemoConfig.small() if args.small else DemoConfig()
        out = make_demo(args.out, cfg, workdir=args.keep, keep=keep, overwrite=args.force, log=log)
    except MemtuiError as exc:
        log(f"memtui: {exc}")
        return 2
    log(f"open it with `memtui {out}`; estimate with `memtui estimate {out}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
