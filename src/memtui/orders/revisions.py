"""Checkpoint names on the hub, per family: a step's revision without knowing the family's naming.

A revision template is text with ``{step}`` (Python format syntax, so ``ckpt_{step:03d}`` pads) and, for the OLMo
names that carry the tokens seen, ``{tokens_ceil*T}`` or ``{tokens_round*T}``: ``step · T / 1e9`` rounded up or to
the nearest whole number, T the tokens per step. The two roundings are what the hub's names show:

- OLMo 1 (``allenai/OLMo-1B``, ``OLMo-7B``): to the nearest, ``step20000-tokens84B`` (83.9 B),
  ``step100000-tokens419B`` (419.4 B) for 1B's 2048 x 2048 tokens per step;
- OLMo 2 (``allenai/OLMo-2-1124-7B``): up, ``stage1-step928646-tokens3896B`` (3895.03 B) for 1024 x 4096, as the
  upload scripts compute ``math.ceil(step * tokens_per_step / 1e9)``.

A stage that restarts its step count (OLMo 2's stage-2 "ingredients", trained after stage 1's last step) names its
checkpoints by the steps *within the stage*: ``{step-O}`` stands for ``step - O`` (O the stage's first panel step,
``build --step-offset``), and the tokens fields then count the stage's tokens too, as the hub's names do
(``allenai/OLMo-2-0325-32B``: ``stage2-ingredient1-step11921-tokens101B`` for 11,921 x 2048 x 4096 = 100.0006 B).

The hub's names come from the trainer's token counter: where one differs, resolve the names against the repo's
branches (``memtui.orders.olmo.match_revisions``).

**DataDecide** (AI2's 25 corpora x 14 sizes, ``allenai/DataDecide-{recipe}-{size}``) names a checkpoint
``step{N}-seed-{seed}``: allenai/DataDecide ``release/upload_checkpoints.py`` (commit ``baee26e1``) uploads each
``step{N}-unsharded-hf`` as ``branch_name = f"{step.replace('-unsharded-hf','')}-seed-{seed}"`` with ``seed =
SEED_MAPPING[seed].replace(" ", "-")`` and ``SEED_MAPPING = {6198: "default", 14: "small aux 2", 15: "small aux 3",
4: "large aux 2", 5: "large aux 3"}``; the model cards load ``revision="step69369-seed-default"``. The preset
``datadecide`` takes the seed's name from the panel (``build --order datadecide`` records it); the ``datadecide-NAME``
presets name it outright.

**A manifest** (``memtui.orders.manifests``: OLMo-core's checkpoint CSV or a ``revisions.txt``) stands in for a
template as ``@manifest:STAGE:PATH`` (STAGE empty for a single-stage list): each step's revision is the one it lists.

**Weight averages.** :func:`weight_average` says from a revision's name whether the checkpoint is an average of
weights rather than one model's training state, where the family's naming says so (quoted there).
"""

from __future__ import annotations

import functools
import math
import os
import re

from memtui.core.errors import MemtuiError

_TOKENS = re.compile(r"\{tokens_(ceil|round)\*(\d+)\}")
_OFFSET = re.compile(r"\{step-(\d+)\}")
_STAGE2 = "stage2-ingredient{k}-step{{step-O}}-tokens{{tokens_ceil*T}}B"

# DataDecide's training seeds and the names its branches carry (allenai/DataDecide release/upload_checkpoints.py)
DATADECIDE_SEEDS: dict[int, str] = {6198: "default", 14: "small-aux-2", 15: "small-aux-3", 4: "large-aux-2",
                                    5: "large-aux-3"}  # fmt: skip
DATADECIDE_SEED_NAMES = tuple(DATADECIDE_SEEDS.values())

# preset -> template
PRESETS: dict[str, str] = {
    "pythia": "step{step}",
    "polypythia": "step{step}",
    "hubble": "step{step}",
    "olmo1": "step{step}-tokens{tokens_round*T}B",
    "olmo2-stage1": "stage1-step{step}-tokens{tokens_ceil*T}B",
    # OLMo 2's mid-training mixes (one panel per ingredient: build --stage-name stage2-ingredientK --step-offset N)
    **{f"olmo2-stage2-ingredient{k}": _STAGE2.format(k=k) for k in (1, 2, 3)},
    "amber": "ckpt_{step:03d}",
    # DataDecide: the seed's name from the panel (datadecide), or given (datadecide-default, ...)
    "datadecide": "step{step}-seed-{seed}",
    **{f"datadecide-{name}": f"step{{step}}-seed-{name}" for name in DATADECIDE_SEED_NAMES},
    # SmolLM2's intermediate checkpoints (HuggingFaceTB/SmolLM2-1.7B-intermediate-checkpoints, revision "step-125000")
    "smollm2": "step-{step}",
    # SmolLM3's stage 1 (HuggingFaceTB/SmolLM3-3B-checkpoints' card: revision = "stage1-step-40000", every 40,000 steps)
    "smollm3-stage1": "stage1-step-{step}",
    # Pico: a checkpoint is a commit of branch {repo}-1 titled "Saving HF Model -- Step N", resolved from the hub
    "pico": "@commits:{repo}@{branch}",
}
MANIFEST = "@manifest:"
COMMITS = "@commits:"


def _billions(tokens: int, rounding: str) -> int:
    if rounding == "ceil":
        return -(-tokens // 10**9)  # exact integer ceiling (no float error at 4e12 tokens)
    return math.floor(tokens / 10**9 + 0.5)


def manifest_template(path: str | os.PathLike, stage: str | None = None) -> str:
    """The template that names each step by the manifest at ``path`` (absolute, so that workers elsewhere find it)."""
    stage = stage or ""
    if ":" in stage or "\n" in stage or "\x00" in stage:
        raise MemtuiError("--manifest-stage: a stage's name holds no ':', line break or NUL; give it as the CSV does.")
    from memtui.orders.manifests import read_manifest

    absolute = os.path.abspath(os.fspath(path))
    read_manifest(absolute, stage=stage or None)  # refuse a bad manifest at launch, not in a worker
    return f"{MANIFEST}{stage}:{absolute}"


def pico_template(model: str) -> str:
    """``--revisions pico`` for ``model`` (``pico-lm/pico-decoder-tiny``): its branch ``pico-decoder-tiny-1``'s
    commits, one per checkpoint (the model cards: "The `pico-decoder-tiny-1` branch contains the full commit history
    for the training run")."""
    repo = str(model).strip().strip("/")
    if repo.count("/") != 1 or "@" in repo or ":" in repo:
        raise MemtuiError(f"--revisions pico: '{repo[:80]}' is not a hub repo id like pico-lm/pico-decoder-tiny.")
    return f"{COMMITS}{repo}@{repo.split('/')[1]}-1"


def manifest_of(template: str):
    """The manifest a ``@manifest:`` template names, or the commit list a ``@commits:`` one resolves to (None for any
    other template)."""
    if template.startswith(COMMITS):
        repo, _, branch = template[len(COMMITS) :].rpartition("@")
        return _commits(repo, branch)
    if not template.startswith(MANIFEST):
        return None
    stage, _, path = template[len(MANIFEST) :].partition(":")
    try:
        st = os.stat(path)
        key = (st.st_mtime_ns, st.st_size)
    except OSError:
        key = (0, 0)
    return _read(path, stage or None, key)


@functools.lru_cache(maxsize=8)
def _commits(repo: str, branch: str):
    """Pico's checkpoints as a manifest: each step's newest commit of ``branch`` titled ``Saving HF Model -- Step N``
    (``memtui.orders.pico.commits_by_step``), from the hub's commit list; asked once per process."""
    from memtui.orders.manifests import Checkpoint, Manifest
    from memtui.orders.pico import commits_by_step

    steps = commits_by_step(list_commits(repo, branch))
    if not steps:
        raise MemtuiError(
            f"{repo}@{branch}: no commit titled 'Saving HF Model -- Step N'; is it a Pico run's branch? (a manifest "
            "CSV with Step and Revision columns names commits by hand: --manifest)"
        )
    source = f"{repo}@{branch}'s commits"
    return Manifest(source, tuple(Checkpoint(s, steps[s], branch) for s in sorted(steps)), (branch,))


def list_commits(repo: str, branch: str) -> list[tuple[str, str]]:
    """(title, commit id) of ``branch``'s commits, newest first, as ``HfApi.list_repo_commits`` gives them."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise MemtuiError(
            f"--revisions pico: {repo}'s checkpoints are commits of {branch}, found in the hub's commit list, and "
            "HF_HUB_OFFLINE is set; list them online into a CSV (Step,Revision) and give it as --manifest."
        )
    try:
        from huggingface_hub import HfApi

        commits = HfApi().list_repo_commits(repo, revision=branch)
    except Exception as exc:  # noqa: BLE001 - the hub's errors (missing repo, branch, network) as one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise MemtuiError(f"cannot list the commits of {repo}@{branch}: {first}") from None
    return [(c.title, c.commit_id) for c in commits]


@functools.lru_cache(maxsize=8)
def _read(path: str, stage: str | None, _key: tuple):  # the key rereads a manifest edited since
    from memtui.orders.manifests import read_manifest

    return read_manifest(path, stage=stage)


def revision_name(template: str, step: int) -> str:
    """The revision of ``step`` under ``template`` (one-line refusal for a template that cannot be filled)."""
    manifest = manifest_of(template)
    if manifest is not None:
        return manifest.revision(int(step))
    offsets = {int(m) for m in _OFFSET.findall(template)}
    if len(offsets) > 1:
        raise MemtuiError(f"revision template '{template}' names two stage offsets ({{step-N}}); give one.")
    offset = offsets.pop() if offsets else 0
    if int(step) < offset:
        raise MemtuiError(
            f"step {int(step)} comes before the stage whose names template '{template}' gives (its steps start after "
            f"{offset}); extract that stage's steps only."
        )
    step = int(step) - offset
    text = _TOKENS.sub(lambda m: str(_billions(step * int(m[2]), m[1])), _OFFSET.sub("{step}", template))
    try:
        return text.format(step=step)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise MemtuiError(
            f"cannot use revision template '{template}' ({type(exc).__name__}: {exc}); use {{step}} for the step, "
            "e.g. step{step}, and {tokens_ceil*T} / {tokens_round*T} for billions of tokens at T tokens per step."
        ) from None


def preset_template(
    preset: str, tokens_per_step: int | None = None, step_offset: int | None = None, seed: str | None = None
) -> str:
    """The revision template of a family preset; the OLMo presets need the run's tokens per step, and the stage-2
    ones the stage's first step (the panel records both: attributes ``tokens_per_step`` and ``step_offset``);
    ``datadecide`` the seed's name (attribute ``datadecide_seed``)."""
    if preset not in PRESETS:
        raise MemtuiError(f"--revisions: unknown preset '{preset}'; choose one of {', '.join(PRESETS)}.")
    template = PRESETS[preset]
    if template.startswith(COMMITS):
        raise MemtuiError(f"--revisions {preset}: a checkpoint is a commit of the model's branch; see pico_template.")
    if "{seed}" in template:
        if seed not in DATADECIDE_SEED_NAMES:
            raise MemtuiError(
                f"--revisions {preset}: the branch names carry the seed's name, which this panel does not record "
                f"(build it with --order datadecide), so name it: --revisions datadecide-NAME, NAME one of "
                f"{', '.join(DATADECIDE_SEED_NAMES)}."
            )
        template = template.replace("{seed}", seed)
    if "*T}" in template:
        if not tokens_per_step or tokens_per_step < 1:
            raise MemtuiError(
                f"--revisions {preset}: the names carry the tokens seen, so the tokens per step are needed; the panel "
                "records them when built with --order olmo or olmo-core (attribute tokens_per_step)."
            )
        template = template.replace("*T}", f"*{int(tokens_per_step)}}}")
    if "{step-O}" in template:
        if step_offset is None or step_offset < 0:
            raise MemtuiError(
                f"--revisions {preset}: a stage-2 ingredient counts its own steps, so its stage's first step is "
                "needed; "
                "the panel records it when built with --order olmo --step-offset N (attribute step_offset)."
            )
        template = template.replace("{step-O}", f"{{step-{int(step_offset)}}}")
    return template


# -- weight averages --------------------------------------------------------------------------------------------------

# (repo, names) whose checkpoints the family's own documents call weight averages, with the kind and the quote
_AVERAGED_BRANCHES: tuple[tuple[str, frozenset[str], str], ...] = (
    # marin-community/marin-8b-base's model card, "Pre-training Phases": "All released pre-training checkpoints except
    # Kestrel use an exponential moving average of the model weights." (`main` currently refers to deeper-starling)
    (
        "marin-community/marin-8b-base",
        frozenset({"main", "ocelot", "jellyfish", "phoenix", "starling", "deeper-starling"}),
        "ema",
    ),  # fmt: skip
    # allenai/OLMo-core src/scripts/official/OLMo2/README.md: "Final Souped Model | main | No config, weights averaged
    # in Python" (OLMo 2 32B's main is the soup of its three stage-2 ingredients)
    ("allenai/olmo-2-0325-32b", frozenset({"main"}), "soup"),
)
# a word of a revision name that says the checkpoint is an average (soup, EMA, merge), whatever the family
_AVERAGE_WORDS = {"soup": "soup", "souped": "soup", "ema": "ema", "merged": "merged", "merge": "merged",
                  "average": "average", "averaged": "average", "avg": "average", "swa": "average"}  # fmt: skip


def weight_average(revision: str, model: str = "") -> str:
    """The kind of weight average (``ema``, ``soup``, ``merged``, ``average``) a checkpoint is, from its revision
    (``repo@name``, or a name with ``model`` the repo); empty for one model's training state or where the name does
    not say. A manifest's ``Average`` column or ``average=KIND`` flag says it for a name that does not."""
    repo, _, name = revision.rpartition("@") if "@" in revision else (model, "", revision)
    repo = (repo or model).strip().lower()
    for known, names, kind in _AVERAGED_BRANCHES:
        if repo == known and name in names:
            return kind
    for word in re.split(r"[-_/.\s]+", name.lower()):
        if word in _AVERAGE_WORDS:
            return _AVERAGE_WORDS[word]
    return ""
