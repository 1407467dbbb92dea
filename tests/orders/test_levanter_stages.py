"""Levanter's weight stages and batch-size schedules against its own code (tests/orders/levanter_ref, commit 9263f81):
``MixtureDataset`` with a list of stages, ``rescale_mixture_schedule_for_batch_schedule`` and ``BatchSchedule`` run on
jax, on datasets whose rows carry their own numbers; then ``memtui build`` with ``--train-weights`` and
``--batch-schedule``, and the refusals.

The keys are derived as ``train_lm.py`` and ``LMMixtureDatasetConfig.train_set`` derive them (see test_levanter.py):
a dataset is loaded, and keyed, when some stage weights it above 0 (``build_caches``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("jaxtyping")
pytest.importorskip("async_lru")
pytest.importorskip("tensorstore")
sys.path.insert(0, str(Path(__file__).parent / "levanter_ref"))

from levanter.data.dataset import ListAsyncDataset  # noqa: E402
from levanter.data.mixture import MixtureDataset, rescale_mixture_schedule_for_batch_schedule  # noqa: E402
from levanter.schedule import BatchSchedule as RefSchedule  # noqa: E402
from levanter.schedule import ScheduleStep  # noqa: E402
from levanter.utils.jax_utils import key_iterator  # noqa: E402
from test_levanter import SEQ, write_cache  # noqa: E402

from memtui.cli.main import main  # noqa: E402
from memtui.core.errors import MemtuiError  # noqa: E402
from memtui.orders import levanter_prng as prng  # noqa: E402
from memtui.orders.levanter import LevanterConfig, LevanterOrder, Source, open_run  # noqa: E402
from memtui.orders.levanter_mixture import Mixture  # noqa: E402
from memtui.orders.levanter_schedule import BatchSchedule, parse_batch_schedule, parse_train_weights  # noqa: E402
from memtui.panel.hdf5 import read_panel, read_tokens  # noqa: E402
from memtui.panel.model import NEVER  # noqa: E402


def _ref_schedule(segments):
    return RefSchedule(segments[0][1] if len(segments) == 1 else [ScheduleStep(s, v) for s, v in segments])


def _reference(lengths, stages, segments, seed, shuffle, kind, block, positions):
    """Levanter's own mixture at ``positions``, its stages given in steps as the config gives them."""
    data_key = jax.random.split(jax.random.PRNGKey(seed), 4)[0]
    mix_key, shuffle_key = jax.random.split(data_key)
    keys = key_iterator(shuffle_key)
    sets = {}
    for name, n in lengths.items():
        if not any(w.get(name, 0) > 0 for _, w in stages):  # build_caches("train") skips it
            continue
        ds = ListAsyncDataset([(name, i) for i in range(n)], is_complete=True)
        sets[name] = (
            ds.shuffle(next(keys), perm_type=kind)
            if shuffle is True
            else ds.era_shuffle(shuffle, key=next(keys), perm_type=kind)
        )
    weights = rescale_mixture_schedule_for_batch_schedule(stages, _ref_schedule(segments))
    mix = MixtureDataset(sets, weights, block_size=block, key=mix_key)
    return mix.as_sync_dataset().get_batch([int(p) for p in positions])


def _order(lengths, stages, segments, seed, shuffle, kind, block, mode, total):
    config = LevanterConfig(
        sources=[Source(n, "") for n in lengths], seq_len=SEQ, batch=segments[0][1], seed=seed, shuffle=shuffle,
        permutation=kind, block_size=block, mixture=True, prng=mode, weight_stages=stages,
        batch_schedule=BatchSchedule(segments),
    )  # fmt: skip
    return LevanterOrder(config, np.array(list(lengths.values())), total=total)


LENGTHS = {"web": 700, "off": 25, "code": 90, "math": 33, "cool": 41}
CASES = {
    # a cooldown: "cool" 0 in the first stage, positive later; "code" positive, then 0; "off" 0 in every stage
    "two stages": (
        [
            (0, {"web": 0.6, "code": 0.3, "math": 0.1, "cool": 0.0}),
            (8, {"web": 0.2, "code": 0.0, "math": 0.3, "cool": 0.5}),
        ],
        [(0, 24)],
        64,
    ),  # fmt: skip
    "three stages, a schedule": (
        [(0, {"web": 1.0}), (4, {"cool": 2.0, "web": 1.0, "off": 0.0}), (9, {"math": 0.7, "code": 0.29, "web": 0.01})],
        [(0, 16), (4, 32), (6, 48)],
        16,
    ),  # fmt: skip
    "one stage as a list, odd block": ([(0, {"code": 3.0, "math": 1.0, "web": 5.0})], [(0, 21), (3, 7)], 37),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("shuffle", "kind"), [(True, "linear"), (True, "feistel"), (19, "linear")])
def test_stages_match_levanter(mode, case, shuffle, kind):
    """Every position of the run, and each instance's first exposure and exposure count, equal Levanter's."""
    stages, segments, block = CASES[case]
    sched = _ref_schedule(segments)
    total = sched.global_data_offset_by_step(14)  # 14 steps: the last block cut where the block size allows
    names = list(LENGTHS)
    offsets = np.cumsum([0, *LENGTHS.values()])
    for seed in (0, 5):
        ref = _reference(LENGTHS, stages, segments, seed, shuffle, kind, block, range(total))
        order = _order(LENGTHS, stages, segments, seed, shuffle, kind, block, mode, total)
        want = [int(offsets[names.index(d)]) + r for d, r in ref]
        assert order.instance(np.arange(total)).tolist() == want
        where: dict[int, list[int]] = {}
        for p, inst in enumerate(want):
            where.setdefault(inst, []).append(p)
        probe = np.array(sorted(where)[::3] + [int(offsets[1]), int(offsets[-1]) - 1])  # "off" and unseen rows too
        first, count = order.exposures(probe)
        assert first.tolist() == [where.get(i, [-1])[0] for i in probe.tolist()]
        assert count.tolist() == [len(where.get(i, [])) for i in probe.tolist()]


def test_stage_counts_match_levanter():
    """The per-stage places per block and the offsets of the stages before, against ``_initialize_stage_counts``."""
    rng = np.random.default_rng(0)
    for _ in range(40):
        block = int(rng.integers(1, 3000))
        n_sets = int(rng.integers(1, 6))
        starts = np.r_[0, np.cumsum(rng.integers(1, 50, size=int(rng.integers(0, 4))))] * block
        stages = [(int(s), {f"d{i}": float(rng.choice([0, rng.random(), rng.integers(1, 9)])) for i in
                            range(n_sets)}) for s in starts]  # fmt: skip
        for _, w in stages:
            w["d0"] += 0.25  # no stage sums to 0
        ref = MixtureDataset(
            {f"d{i}": ListAsyncDataset([0], is_complete=True) for i in range(n_sets)}, stages, block, key=0
        )
        keyed = list(ref.dataset_index)
        mix = Mixture([(s, [w.get(n, 0.0) for n in keyed], sum(w.values())) for s, w in stages], block, None, "legacy")
        for s in range(len(stages)):
            assert mix.stage_counts[s].tolist() == ref._counts_per_block_per_stage[s].tolist()
            if s:
                assert mix.after[s].tolist() == ref._counts_after_stage[s - 1].tolist()


@pytest.mark.parametrize("wrap_to", ["zero", "negative"])
def test_huge_stage_offsets_wrap_as_levanter(mode, wrap_to):
    """A dataset served 2**31 times or more before a stage: Levanter's int32 counts wrap, and so do memtui's, both
    ways: the rows served past the stage's start, and each row's exposures (stage 0's counted, stage 1's seen)."""
    block, n_a, n_b = 2048, 1009, 50
    blocks = 2**21 if wrap_to == "zero" else 2**20 + 5  # 2**32 places of "a" before stage 1, or 2**31 + 5·2048
    start = block * blocks
    stages = [(0, {"a": 1.0}), (start, {"a": 0.5, "b": 0.5})]
    sets = {"a": ListAsyncDataset(list(range(n_a)), is_complete=True),
            "b": ListAsyncDataset(list(range(n_b)), is_complete=True)}  # fmt: skip
    ref = MixtureDataset(sets, stages, block, key=jax.random.PRNGKey(3))
    total = start + 3 * block + 5
    window = np.arange(start - 3, total)
    got = ref.as_sync_dataset().get_batch(window.tolist())
    mix = Mixture([(s, [w.get("a", 0.0), w.get("b", 0.0)], None) for s, w in stages], block, prng.prng_key(3), mode)
    d, k = mix.locate(window)
    rows = np.where(d == 0, k % n_a, k % n_b)
    assert rows.tolist() == got
    late = window >= start
    d0, k0 = mix.locate(np.arange(block))  # stage 0's first block: each row of "a" at most twice
    for di, n in ((0, n_a), (1, n_b)):
        seen = rows[late & (d == di)]
        for q in [*seen[:4].tolist(), *sorted(set(range(n)) - set(seen.tolist()))[:2]]:
            first, count = mix.exposures(di, q, n, total)
            hits = window[late & (d == di) & (rows == q)]
            before = (start - 1 - q) // n + 1 if di == 0 else 0  # stage 0: a in every place, index = place
            assert count == before + len(hits)
            if di == 0:
                assert first == int(np.flatnonzero(k0 % n_a == q)[0])
            else:
                assert first == (int(hits[0]) if len(hits) else -1)


def test_wrap_inside_a_block_refused():
    """``_counts_after_stage`` within one block's places of 2**31: Levanter's int32 sum wraps mid-block; refused."""
    block = 1000  # c = 1000 places a block: 2147483 blocks give 2**31 − 648
    stages = [(0, [1.0, 0.0], None), (block * 2147483, [3.0, 1.0], None)]  # then 750 places: past 2**31
    with pytest.raises(MemtuiError, match="wraps inside one block"):
        Mixture(stages, block, prng.prng_key(0), "legacy")


def test_batch_schedule_matches_levanter():
    for segments in ([(0, 64)], [(0, 64), (64, 128), (256, 64), (1024, 256)], [(0, 1), (1, 3), (2, 2**20)]):
        ref, mine = _ref_schedule(segments), BatchSchedule(segments)
        steps = np.r_[np.arange(0, 2000), 10**9]
        assert mine.offset(steps).tolist() == [ref.global_data_offset_by_step(int(s)) for s in steps]
        assert mine.batch_at(steps[:2000]).tolist() == [ref.batch_size_at_step(int(s)) for s in steps[:2000]]
        offsets = np.r_[np.arange(0, 5000), np.random.default_rng(1).integers(0, 10**12, 500)]
        assert mine.step_of(offsets).tolist() == [ref.find_step_containing_offset(int(o)) for o in offsets]
        n = int(mine.offset(300)) + 1
        assert mine.steps_within(n) == 300 and mine.steps_within(n - 1) == 300 and mine.steps_within(n - 2) == 299


# -- the CLI -----------------------------------------------------------------------------------------------------------

CLI_LENGTHS = {"web": 2000, "code": 90, "math": 30}


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    return {n: str(write_cache(root / n, d, rows)) for d, (n, rows) in enumerate(CLI_LENGTHS.items())}


def test_cli_panel_with_stages_and_schedule(tmp_path, caches):
    """Each instance is the row Levanter serves at its first position, treated at the first checkpoint at or after
    the step whose data offsets hold that position (the batch doubles at step 10 and again at 30)."""
    stages_yaml = "[[0, {web: 0.9, code: 0.1}], [20, {web: 0.3, code: 0.2, math: 0.5}]]"
    sched_yaml = "[{start: 0, value: 8}, {start: 10, value: 16}, {start: 30, value: 32}]"
    out = tmp_path / "p.h5"
    args = ["build", str(out), "--order", "levanter", "--caches", *(f"{n}={p}" for n, p in caches.items()),
            "--seq-len", str(SEQ), "--train-weights", stages_yaml, "--batch-schedule", sched_yaml,
            "--mixture-block-size", "16", "--trainer-seed", "2", "--steps", "10,25,40", "--train-steps", "50",
            "-k", "5", "-m", "4", "--n-validation", "30"]  # fmt: skip
    assert main(args) == 0
    stages = parse_train_weights(stages_yaml, list(CLI_LENGTHS))
    segments = [(0, 8), (10, 16), (30, 32)]
    sched = _ref_schedule(segments)
    positions = range(sched.global_data_offset_by_step(40) + 64 * 30)  # the controls are drawn below it
    ref = _reference(CLI_LENGTHS, stages, segments, 2, True, "linear", 16, positions)
    first_pos: dict[tuple[int, int], int] = {}
    for p, (d, r) in enumerate(ref):
        first_pos.setdefault((list(CLI_LENGTHS).index(d), r), p)
    panel, (tokens, _) = read_panel(out), read_tokens(out)
    treated = panel.treatment != NEVER
    assert treated.sum() > 0 and (~treated).sum() > 0 and set(panel.treatment[treated].tolist()) == {10, 25, 40}
    for row, treat in zip(tokens[:, :2].tolist(), panel.treatment.tolist(), strict=True):
        p = first_pos[tuple(row)]
        step = sched.find_step_containing_offset(p) + 1
        if treat == NEVER:
            assert step > 40
        else:
            assert treat == min(c for c in (10, 25, 40) if c >= step)


def test_single_dataset_with_schedule(caches):
    """A single dataset runs as many whole steps as its rows fill under the schedule."""
    schedule = parse_batch_schedule("[{start: 0, value: 100}, {start: 5, value: 300}]")
    config = LevanterConfig(
        sources=[Source("web", caches["web"])], seq_len=SEQ, batch=100, mixture=False, batch_schedule=schedule
    )
    run = open_run(config, None)
    assert run.train_steps == 5 + (2000 - 500) // 300 and run.order.total == 500 + 5 * 300
    assert run.order.never_in_order() == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train-weights", "[[100, {web: 1}], [0, {web: 1, code: 1}]]"], "step 0"),
        (["--train-weights", "[[0, {web: 1}], [50, {code: 1}], [20, {web: 1}]]"], "sorted"),
        (["--train-weights", "[[0, {web: 1}], [20, {web: 1}], [20, {code: 1}]]"], "sorted"),
        (["--train-weights", "[[0, {web: 1}], [3, {code: 1}]]"], "multiple of the mixture block"),
        (["--train-weights", "[[0, {web: 1}], [20, {web: 0, code: 0}]]"], "sum to 0"),
        (["--train-weights", "[[0, {}]]"], "mapping"),
        (["--train-weights", "[[0, {web: -1, code: 2}]]"], "number >= 0"),
        (["--train-weights", "[[0, {web: .nan}]]"], "number >= 0"),
        (["--train-weights", "[[0, {web: .inf}]]"], "number >= 0"),
        (["--train-weights", "[[0, {web: true}]]"], "number >= 0"),
        (["--train-weights", "[[0, {web: 1e400}]]"], "number >= 0"),
        (["--train-weights", "[[0, {nope: 1}]]"], "no --caches entry"),
        (["--train-weights", "[[-1, {web: 1}]]"], "from 0"),
        (["--train-weights", f"[[0, {{web: 1}}], [{10**30}, {{code: 1}}]]"], "from 0"),
        (["--train-weights", "[[0.5, {web: 1}]]"], "whole number"),
        (["--train-weights", "[0, {web: 1}]"], "each stage"),
        (["--train-weights", "web=1"], "takes"),
        (["--train-weights", "[[0, {web: 1}"], "not YAML"),
        (["--train-weights", "[" * 100_001], "more than"),
        (["--train-weights", "[" * 5000], "not YAML"),
        (["--train-weights", "{web: 1}", "--weights", "web=1"], "drop --weights"),
        (["--train-weights", "{web: 1}", "--single-dataset"], "drop --weights and --single-dataset"),
        (["--batch-schedule", "[{start: 0, value: 8}, {start: 0, value: 16}]"], "starts must increase"),
        (["--batch-schedule", "[{start: 0, value: 8}, {start: 20, value: 16}, {start: 10, value: 4}]"], "increase"),
        (["--batch-schedule", "[{start: 5, value: 8}]"], "step 0"),
        (["--batch-schedule", "[{start: 0, value: 0}]"], "batch size"),
        (["--batch-schedule", f"[{{start: 0, value: {2**70}}}]"], "batch size"),
        (["--batch-schedule", "[{start: 0, value: 8, extra: 1}]"], "each entry"),
        (["--batch-schedule", "[]"], "YAML list"),
        (["--batch-schedule", "64"], "YAML list"),
        (["--batch-schedule", "[{start: 0, value: 8}]", "--batch-size", "8"], "drop --batch-size"),
        (["--train-steps", str(10**20)], "--train-steps"),
    ],
)
def test_refusals(tmp_path, capsys, caches, extra, message):
    out = tmp_path / "p.h5"
    base = ["build", str(out), "--order", "levanter", "--caches", *(f"{n}={p}" for n, p in caches.items()),
            "--seq-len", str(SEQ), "--mixture-block-size", "16"]  # fmt: skip
    if "--train-steps" not in extra:
        base += ["--train-steps", "40"]
    if "--batch-size" not in extra and "--batch-schedule" not in extra:
        base += ["--batch-size", "8"]
    code = main([*base, *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and err.count("\n") == 1 and err.startswith("memtui: ")
    assert not out.exists()


def test_notes_say_stages_schedule_and_unplaced_sets(caches):
    """The run's notes name the stages, the schedule, and a set a stage weighs but gives no place (Levanter warns)."""
    names = list(CLI_LENGTHS)
    config = LevanterConfig(
        sources=[Source(n, caches[n]) for n in names], seq_len=SEQ, batch=8, shuffle=True, block_size=16,
        mixture=True, weight_stages=parse_train_weights("[[0, {web: 1}], [2, {web: 1, math: 0.01}]]", names),
        batch_schedule=parse_batch_schedule("[{start: 0, value: 8}, {start: 2, value: 16}]"),
    )  # fmt: skip
    run = open_run(config, 10)
    text = " | ".join(run.notes)
    assert "batch sizes 8 from step 1, 16 from step 3" in text and "2 weight stages, from steps 1, 3" in text
    assert "weight stage 2: no place in a block of 16 for math" in text and "weight 0, not read: code" in text
    assert run.order.total == 16 + 8 * 16 and run.train_steps == 10


@pytest.mark.parametrize("option", ["--train-weights", "--batch-schedule"])
def test_alias_bomb_refused_quickly(option):
    """A value that YAML aliases expand to 10**9 entries: refused by its kind, never printed or walked."""
    bomb = "[&a [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]"
    for i in range(1, 9):
        bomb += f", &{chr(97 + i)} [{', '.join(['*' + chr(96 + i)] * 10)}]"
    bomb += "]"
    with pytest.raises(MemtuiError) as err:
        if option == "--train-weights":
            parse_train_weights(f"[[0, {{web: {bomb}}}]]", ["web"])
        else:
            parse_batch_schedule(f"[{{start: 0, value: {bomb}}}]")
    assert "not a list" in str(err.value) and len(str(err.value)) < 200
