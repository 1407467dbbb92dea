"""On CPU in fp32 an instance's scores are bitwise the same whatever batch it is scored in (issue 21).

Every row is scored alone, then in batches of 2, 3 and 8 and all together, in several orders and compositions, with
the batch right-padded to its longest row or to the panel's full width (junk beyond each row's length): every metric
(the four panel metrics, both extractability metrics and the sampling one, ``sampled_logp``) must be equal bit for
bit, NaNs in the same places. Each comparison is within one process and one set of kernels; the check also runs at
two thread counts, and in a subprocess with torch's AVX2 kernels (and MKL's) where the CPU has AVX-512, since
users' CPUs differ.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_models
import torch

from memtui.extract.scoring import Scorer
from memtui.panel import metrics as registry

VOCAB = 211
WIDTH = 48
KL = (3, 5)  # small enough that most rows have an extractability score
# top-k wide enough that random suffixes often stay inside it (a finite sampled_logp), narrow enough to cut some off
SAMPLING = (200, 0.9)
HERE = Path(__file__).resolve()


def rows_of_unequal_length(n: int = 24, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Token rows padded with -1 as panels store them; lengths from 1 (no target) to WIDTH, a few repeated."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, size=(n, WIDTH))
    lengths = rng.integers(2, WIDTH + 1, size=n)
    lengths[:4] = WIDTH  # a group of equal full-width rows
    lengths[4:7] = 17  # and a group of equal shorter ones
    lengths[7], lengths[8], lengths[9] = 1, 2, KL[0] + KL[1] - 1  # no target; one target; one short of extractable
    tokens[np.arange(WIDTH)[None, :] >= lengths[:, None]] = -1
    return tokens, lengths


def score_in_batches(scorer: Scorer, tokens, lengths, order, size: int, full_width: bool) -> dict[str, np.ndarray]:
    """Score rows ``order`` in consecutive batches of ``size``, as the worker slices them, back in row order."""
    out: dict[str, np.ndarray] = {}
    for i in range(0, len(order), size):
        rows = order[i : i + size]
        width = WIDTH if full_width else int(lengths[rows].max())
        got = scorer.score(tokens[rows, :width], lengths[rows])
        for name, values in got.items():
            out.setdefault(name, np.full(len(order), -7.0))[rows] = values
    return out


def mismatches(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> list[str]:
    bad = []
    for name, a in ref.items():
        b = got[name]
        if not (np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a, b, equal_nan=True)):
            rows = np.flatnonzero(~((a == b) | (np.isnan(a) & np.isnan(b))))
            bad.append(f"{name}: rows {rows.tolist()} differ by up to {np.nanmax(np.abs(a - b)):.3g}")
    return bad


def invariance_failures(chunk: int | None, few: bool = False) -> list[str]:
    """Every (order, batch size, padding) setup whose scores differ from the rows' scores alone; ``few``: a subset
    (two threads on a shared 2-core machine wait on each other, and the full set then takes minutes)."""
    model = tiny_models.tiny_model(0, VOCAB, hidden=48, positions=64, sharpen=20)
    scorer = Scorer(model, torch.device("cpu"), chunk=chunk, extractable=KL, sampling=SAMPLING)
    tokens, lengths = rows_of_unequal_length()
    n = len(lengths)
    rng = np.random.default_rng(0)
    alone = score_in_batches(scorer, tokens, lengths, np.arange(n), 1, full_width=False)
    assert np.isnan(alone["loglik"][7]) and np.isnan(alone["extractable"][9]) and not np.isnan(alone["loglik"][8])
    assert np.nanmean(alone["accuracy"]) > 0 and np.nanstd(alone["entropy"]) > 0  # the scores are not trivial
    sampled = alone["sampled_logp"][np.isfinite(alone["sampled_logp"])]
    assert (sampled > registry.SAMPLED_LOGP_FLOOR).sum() >= 3 and (sampled == registry.SAMPLED_LOGP_FLOOR).any()
    orders = {
        "row order": np.arange(n),
        "longest first": np.argsort(-lengths, kind="stable"),
        "shuffled": rng.permutation(n),
        "reversed": np.arange(n)[::-1],
    }
    if few:
        orders = {"shuffled": orders["shuffled"]}
    failures = []
    for (label, order), size, full in (
        (o, s, f) for o in orders.items() for s in ((3, n) if few else (2, 3, 8, n)) for f in (False, True)
    ):
        bad = mismatches(alone, score_in_batches(scorer, tokens, lengths, order, size, full))
        failures += [f"{label}, batches of {size}{', full width' if full else ''}: {b}" for b in bad]
    return failures


@pytest.mark.parametrize(("chunk", "threads"), [(None, 1), (5, 1), (None, 2)])
def test_scores_do_not_depend_on_the_batch(chunk, threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        failures = invariance_failures(chunk, few=threads > 1)
    finally:
        torch.set_num_threads(before)
    assert not failures, "\n".join(failures[:12])


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx512(), reason="the CPU has no AVX-512: torch and MKL already use their AVX2 kernels")
def test_invariant_with_avx2_kernels_too():
    """Users' CPUs differ: with torch's and MKL's AVX2 code paths (another GEMM blocking, other reductions) the
    scores must be just as invariant. Set before torch is imported, so in a fresh process."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), str(HERE.parent), env.get("PYTHONPATH", "")])
    code = (
        "import torch, test_batch_invariance as t; assert torch.backends.cpu.get_cpu_capability() == 'AVX2'; "
        "f = t.invariance_failures(None) + t.invariance_failures(5); print('\\n'.join(f[:12]) or 'ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok", proc.stdout[-3000:]


def test_batch_invariant_option_reaches_the_workers():
    """`extract --batch-invariant on|off|auto` is an option, validated, and passed to every worker's command line."""
    import argparse

    from memtui.core.errors import MemtuiError
    from memtui.extract.options import ExtractOptions

    p = argparse.ArgumentParser()
    ExtractOptions.add_worker_arguments(p)
    on = ExtractOptions.from_args(p.parse_args(["--model", "m", "--batch-invariant", "on"])).validate()
    assert on.batch_invariant == "on" and on.worker_argv()[-2:] == ["--batch-invariant", "on"]
    auto = ExtractOptions.from_args(p.parse_args(["--model", "m"])).validate()
    assert auto.batch_invariant == "auto" and "--batch-invariant" not in auto.worker_argv()
    with pytest.raises(MemtuiError, match="auto, on or off"):
        ExtractOptions(model="m", batch_invariant="sometimes").validate()


@pytest.mark.parametrize(("device", "invariant"), [("cpu", True), ("cuda", True), ("mps", False)])
def test_the_invariant_path_is_the_default_where_it_was_measured(device, invariant):
    """`--batch-invariant auto` takes the invariant path on CPU and CUDA (bitwise on an H100 in bf16 and fp32, for
    1.14x the fast path's time: docs/extraction.md) and the fast path on MPS, where nothing was measured; an explicit
    choice wins everywhere. (Constructing the scorer allocates nothing on ``device``.)"""
    model = tiny_models.tiny_model(0, VOCAB, hidden=48, positions=64, sharpen=20)
    dev = torch.device(device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        assert Scorer(model, dev).invariant is invariant
        assert Scorer(model, dev, invariant=not invariant).invariant is (not invariant)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
