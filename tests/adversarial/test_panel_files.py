"""Hostile panel files: cut, damaged, hand-edited, not files at all. Each is refused in one line (exit 2) or, where
the damage missed everything memtui reads, gives exactly the undamaged answer; nothing hangs, nothing is a traceback.

Cut and damaged files run in a child process under a timeout (HDF5 used to loop forever on some of them).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest

from memtui.panel.hdf5 import create_panel, read_panel
from memtui.panel.model import NEVER
from memtui.panel.synthetic import Simulation, write_synthetic

from .conftest import assert_clean_exit, assert_refused, digest, run_memtui

SIM = Simulation(n_cohorts=6, per_cohort=12, n_never=40, n_checkpoints=8, seed=5)
CUTS = [0.01, 0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99]
COMMANDS = {"info": ["info"], "estimate": ["estimate", "-B", "50", "--no-cache"], "status": ["status"]}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A panel written by this memtui, and its estimate as printed (the reference for damaged copies)."""
    path = write_synthetic(tmp_path_factory.mktemp("pristine") / "p.h5", SIM)
    ref = run_memtui("estimate", path, "-B", "50", "--no-cache")
    assert_clean_exit(ref)
    return path, ref.out.split("\n", 1)[1]  # the first line names the file


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("cut", CUTS)
def test_a_cut_panel_is_refused_at_once(pristine, tmp_path, cut, command):
    path, _ = pristine
    data = path.read_bytes()
    cut_path = tmp_path / "cut.h5"
    cut_path.write_bytes(data[: int(len(data) * cut)])
    err = assert_refused(run_memtui(*COMMANDS[command], cut_path, timeout=30))
    assert "is truncated" in err or "not an HDF5 panel file" in err


OFFSETS = [0.0005, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 0.985]


@pytest.mark.parametrize("kind", ["zeros", "random"])
@pytest.mark.parametrize("offset", OFFSETS)
def test_a_damaged_panel_is_refused_or_reads_exactly(pristine, tmp_path, offset, kind):
    path, reference = pristine
    data = bytearray(path.read_bytes())
    at = int(len(data) * offset)
    window = bytes(4096) if kind == "zeros" else np.random.default_rng(at).bytes(4096)
    data[at : at + 4096] = window[: len(data) - at]
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(bytes(data))
    result = run_memtui("estimate", damaged, "-B", "50", "--no-cache", timeout=30)
    if result.code == 0:  # the damage hit only bytes memtui never reads (free space, padding): same answer
        assert result.out.split("\n", 1)[1] == reference
    else:
        assert_refused(result)


def _edit(tmp_path, change):
    path = write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=3, per_cohort=6, n_never=12, n_checkpoints=5))
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def _replace(name, value):
    def change(f):
        del f[name]
        f[name] = value

    return change


def _as_group(name):
    def change(f):
        del f[name]
        f.create_group(name)

    return change


def _attr(key, value):
    def change(f):
        f.attrs[key] = value

    return change


def _link(name, link):
    def change(f):
        del f[name]
        f[name] = link

    return change


EDITS = {
    "metric stored as a group": (_as_group("metrics/loglik"), "is not a dataset"),
    "metrics is a dataset": (_replace("metrics", np.zeros(3)), "no metrics"),
    "no metrics at all": (lambda f: [f["metrics"].pop(k) for k in list(f["metrics"])], "no metrics"),
    "metric of integers": (_replace("metrics/loglik", np.zeros((30, 5), dtype=np.int64)), "expected floating"),
    "metric of strings": (_replace("metrics/loglik", np.full((30, 5), b"x")), "expected floating"),
    "metric of the wrong shape": (_replace("metrics/loglik", np.zeros((30, 4))), "has shape (30, 4)"),
    "revision stored as int": (_replace("checkpoints/revision", np.arange(5)), "expected strings"),
    "revision of the wrong length": (_replace("checkpoints/revision", np.array([b"a"] * 3)), "has shape (3,)"),
    "ids stored as float": (_replace("instances/id", np.arange(30.0)), "expected integers"),
    "ids as a matrix": (_replace("instances/id", np.zeros((30, 2), int)), "at least one instance"),
    "no instances": (_replace("instances/id", np.zeros(0, int)), "at least one instance"),
    "treatment stored as float": (_replace("instances/treatment_step", np.zeros(30)), "expected integers"),
    "treatment of the wrong length": (_replace("instances/treatment_step", np.zeros(29, int)), "has shape (29,)"),
    "treatment below -1": (_replace("instances/treatment_step", np.r_[np.full(15, -1), np.full(15, -7)]), "below -1"),
    "no never-treated instance": (_replace("instances/treatment_step", np.full(30, 1)), "no never-treated"),
    "steps decreasing": (_replace("checkpoints/step", np.arange(5)[::-1].copy()), "strictly increasing"),
    "steps as a matrix": (_replace("checkpoints/step", np.zeros((5, 1), int)), "expected a list of steps"),
    "done flags of floats": (_replace("checkpoints/done", np.ones(5)), "expected flags"),
    "done of the wrong length": (_replace("checkpoints/done", np.ones(4, np.uint8)), "has shape (4,)"),
    "split as numbers": (_replace("instances/split", np.zeros(30)), "expected strings"),
    "split of the wrong length": (_replace("instances/split", np.array([b"train"] * 2)), "has shape (2,)"),
    "truth member is a group": (_as_group("truth/loglik"), "is not a dataset"),
    "sign attribute 5": (lambda f: f["metrics/loglik"].attrs.__setitem__("sign", 5), "sign attribute"),
    "sign attribute text": (lambda f: f["metrics/loglik"].attrs.__setitem__("sign", "up"), "sign attribute"),
    "format attribute missing": (lambda f: f.attrs.__delitem__("format"), "not a memtui panel"),
    "format attribute foreign": (_attr("format", "netcdf"), "not a memtui panel"),
    "format version text": (_attr("format_version", "one"), "format version -1"),
    "format version 99": (_attr("format_version", 99), "format version 99"),
    "metric soft link": (_link("metrics/loglik", h5py.SoftLink("/metrics/rank")), "is a link"),
    "metric external link": (_link("metrics/loglik", h5py.ExternalLink("/etc/hostname", "/x")), "is a link"),
    "ids external link": (_link("instances/id", h5py.ExternalLink("other.h5", "/id")), "is a link"),
    "dangling metrics link": (_link("metrics", h5py.SoftLink("/nowhere")), "no metrics"),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_a_hand_edited_panel_is_refused(cli, tmp_path, case):
    change, expect = EDITS[case]
    path = _edit(tmp_path, change)
    before = digest(path)
    assert_refused(cli("estimate", path, "-B", "0", "--no-cache"), expect)
    assert digest(path) == before


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.h5"
    os.mkfifo(fifo)
    assert_refused(run_memtui("info", fifo, timeout=30), "not a regular file")


def test_a_device_is_refused(cli):
    assert_refused(cli("info", "/dev/zero"), "not a regular file")


def test_a_socket_is_refused(cli, tmp_path):
    path = tmp_path / "p.h5"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        assert_refused(cli("info", path), "not a regular file")
    finally:
        sock.close()


@pytest.mark.parametrize("size", [0, 7, 8, 47, 48])
def test_a_file_that_is_only_a_start_is_refused(cli, tmp_path, size):
    head = b"\x89HDF\r\n\x1a\n" + bytes(48)
    path = tmp_path / "p.h5"
    path.write_bytes(head[:size])
    assert_refused(cli("info", path))


def test_a_damaged_superblock_checksum_is_refused(cli, tmp_path):
    path = write_synthetic(tmp_path / "p.h5", Simulation(n_cohorts=2, per_cohort=4, n_never=6, n_checkpoints=4))
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside the superblock, before its checksum
    path.write_bytes(bytes(data))
    assert_refused(cli("info", path), "fails its checksum")


def test_a_symlink_to_a_panel_reads_like_the_panel(cli, tmp_path, small_panel):
    link = tmp_path / "link.h5"
    link.symlink_to(small_panel)
    assert_clean_exit(cli("info", link))


ESCAPES = {
    "title": "\x1b]0;pwned\x07",
    "clear": "\x1b[2J\x1b[H",
    "colour": "\x1b[31mred",
    "bidi": "safe\u202eexe.h5",
    "c1": "\x9b31m",
    "newline": "one\ntwo",
    "bell": "\x07\x07",
}


@pytest.mark.parametrize("case", list(ESCAPES))
def test_escape_sequences_in_a_panel_never_reach_the_terminal(cli, tmp_path, case):
    hostile = ESCAPES[case]
    path = create_panel(
        tmp_path / "p.h5",
        ids=range(6),
        treatment=[1, 1, 2, 2, NEVER, NEVER],
        steps=[0, 1, 2],
        values={"m": np.random.default_rng(0).normal(size=(6, 3))},
        attrs={"model": hostile, "source": hostile, f"k{hostile}": hostile},
    )
    with h5py.File(path, "r+") as f:  # memtui refuses such a name; another program may still write one
        f["metrics"].move("m", f"m{hostile}")
    code, out, err = cli("info", path)
    assert_clean_exit((code, out, err))
    assert "\u202e" not in out and "\x9b" not in out
    code, out, err = cli("estimate", path, "-B", "0", "--no-cache")
    assert "\x1b" not in out + err and "\u202e" not in out + err and "\x9b" not in out + err


def test_an_extraction_writer_never_grows_the_panel(tmp_path):
    """What extraction writes was preallocated: filling every column changes no byte count (a full disk cannot
    stop a commit half-way or cost an existing checkpoint)."""
    from memtui.panel.hdf5 import PanelWriter

    path = create_panel(tmp_path / "p.h5", ids=range(50), treatment=[NEVER] * 25 + [10] * 25, steps=[0, 10, 20],
                        tokens=np.ones((50, 8), int))  # fmt: skip
    size = path.stat().st_size
    with PanelWriter(path) as w:
        for i in range(3):
            w.write_checkpoint(i, {m: np.full(50, float(i)) for m in ("loglik", "accuracy", "rank", "entropy")},
                               revision=f"step{i * 10}", weights_hash="ab" * 32, model="m" * 300)  # fmt: skip
    assert path.stat().st_size == size
    panel = read_panel(path)
    assert panel.done.all() and panel.models == ["m" * 256] * 3


def test_a_live_reader_is_not_told_a_panel_is_damaged(tmp_path):
    """Checksums meet SWMR: a reader catching a column mid-write reads again instead of refusing the panel."""
    from memtui.panel.hdf5 import PanelWriter

    n = 4000
    path = create_panel(tmp_path / "p.h5", ids=range(n), treatment=[NEVER] * (n // 2) + [10] * (n // 2),
                        steps=list(range(0, 400, 10)), tokens=np.ones((n, 4), int))  # fmt: skip
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom memtui.panel.hdf5 import read_panel\n"
         "for _ in range(300): read_panel(sys.argv[1])\nprint('ok')", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with PanelWriter(path) as w:
        rng = np.random.default_rng(0)
        for i in range(40):
            w.write_checkpoint(i, {"loglik": rng.normal(size=n)})
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0 and out.strip() == "ok", err
