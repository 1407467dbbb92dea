"""Scoring instances with a causal LM without materialising (batch x length x vocabulary) log-probabilities.

The model body runs once per batch; the output head then runs over chunks of target positions, with fp32 logits,
and each chunk is reduced at once to four per-token numbers:

- ``logp``: log p(x_i | x_<i) = z_t - logsumexp(z)
- ``rank``: number of vocabulary entries whose logit is strictly greater than the true token's (0 = top-1)
- ``entropy``: -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v

Per instance these become ``loglik`` (sum of logp over its targets, nats), ``accuracy`` (mean of [rank = 0]),
``rank`` (mean rank) and ``entropy`` (mean entropy, nats). Targets are tokens 2..L of each instance, predicted from
their prefixes; nothing (BOS/EOS) is added. Rows shorter than the batch are right-padded, masked, and their padding is
never scored.

**Batch invariance** (``invariant=True``, the default on CPU and CUDA): an instance's scores are then bitwise the same
whatever batch it is in. On the GPU the padded fast path's bf16 scores moved with the batch by up to 3.95 nats of a
2,049-token row's loglik, the invariant path's not at all, for 3-33 % more time (an H100: the OLMo-2-7B and
pythia-1.4b shapes; docs/extraction.md, "Batch invariance").
Measured on CPU (fp32, MKL/oneDNN, AVX-512 and AVX2 kernels, 1 and 2 threads), the fast path's scores move with the
batch for two reasons: right-padding sends a row through the masked attention path (and a padded length
of its batch's longest row), which changes its hidden states by ~1e-6; and the flat chunked head puts a row's
positions into GEMMs of batch-dependent shapes, where one of M = 1 takes a GEMV path with another summation order.
The invariant path therefore gives every call a row goes through a shape that depends on its own length only:

- rows are grouped by length and never padded; each group runs through the body in micro-batches of exactly
  ``micro_rows(length)`` rows (a power of two from the length alone: one row from 1,025 tokens up), the last
  micro-batch filled up with copies of its last row, whose scores are dropped;
- the head runs per row, over the row's own targets in fixed chunks from its first target.

A row's result could then still depend on its slot in a micro-batch only if a GEMM, LayerNorm or attention kernel
computed one row of its output differently by its position in the matrix; none of the CPU kernels measured does, and
rows of more than 1,024 tokens are alone in their micro-batch, so for them not even that is assumed
(tests/extract/test_batch_invariance.py checks every order, batch size, padding and kernel set it can).

With ``extractable=(k, l)`` the same per-token top-1 flags [rank = 0] also give Carlini et al.'s (k, l)-extractability
without generating anything: greedy decoding from the first k tokens reproduces tokens k+1..k+l exactly when, and only
when, each of them is the top-1 prediction given the true prefix (by induction: while every earlier suffix token was
reproduced, the decoder's prefix *is* the true prefix). ``extractable`` is 1 when all l are top-1, else 0;
``extractable_len`` counts the leading suffix tokens that are top-1 (0..l: what greedy decoding reproduces before its
first mismatch). Rows with fewer than k + l tokens get NaN. Tie rule: a token is top-1 when no vocabulary entry has a
strictly greater logit (rank 0, ties in the model's favour, as for ``accuracy``); a decoder that breaks an exact tie of
the maximal logit by the lowest index (``torch.argmax``) can differ from this only at such a tie.

With a sampling scheme (``sampling=(top_k, temperature)``, by default the registry's k = 40, T = 1) each target also
gets its probability under that sampler, ``slogp`` (Hayes et al. 2024): the sampler keeps every vocabulary entry
whose logit is at least the k-th largest (Hugging Face's ``TopKLogitsWarper``: ties at the boundary are all kept) and
draws from softmax(z / T) over them, so slogp = z_t / T - logsumexp over the kept entries of z / T when fewer than
top_k entries have a strictly greater logit than the target (rank < top_k), else -inf. The probability that one
sampled continuation of the k-token prefix reproduces the l-token suffix exactly is the product of the suffix
targets' sampling probabilities (each is drawn given the true prefix as long as every earlier one was reproduced, as
for greedy decoding above): ``sampled_logp`` is their sum, floored at ``SAMPLED_LOGP_FLOOR`` (a suffix token outside
the top k gives -inf: p = 0).

With a token-level loss mask (``goldfish``, a memtui.orders.goldfish.Goldfish: Apertus's Goldfish loss) each target
is flagged trained or not from the row's own tokens (target j is the run's label j), and ``loglik_trained`` /
``accuracy_trained`` are ``loglik`` / ``accuracy`` over the trained targets only (NaN for a row with none); the
masked targets were never trained on, so scoring them would dilute the memorisation the loss could cause. Controls
get the same rule (the targets the mask would have dropped are left out of theirs), so both arms score the same kind
of token.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from memtui.core.errors import MemtuiError
from memtui.panel import metrics as registry


@dataclass(frozen=True)
class TokenStats:
    """Per-target numbers, targets of one row after another in row order: ``logp`` (fp32), ``rank`` (int64) and
    ``entropy`` (fp32); ``rows`` is each target's row in the batch (None for the targets of one row, ``head_stats``);
    ``slogp`` (fp32) the target's log-probability under the sampling scheme, where the scorer has one."""

    logp: torch.Tensor
    rank: torch.Tensor
    entropy: torch.Tensor
    rows: torch.Tensor | None = None
    slogp: torch.Tensor | None = None

    @classmethod
    def cat(cls, parts: list[TokenStats], rows: torch.Tensor) -> TokenStats:
        """The parts' targets one after another, each part one row's."""
        return cls(
            logp=torch.cat([p.logp for p in parts]),
            rank=torch.cat([p.rank for p in parts]),
            entropy=torch.cat([p.entropy for p in parts]),
            rows=rows,
            slogp=None if parts[0].slogp is None else torch.cat([p.slogp for p in parts]),
        )


@dataclass(frozen=True, eq=False)
class Scores(Mapping):
    """Per-instance metrics of a batch (float64, one value per row): a field per metric the registry says extraction
    computes (``memtui.panel.metrics.EXTRACTED``; a test checks the two agree); the extractability ones are None
    unless the scorer was given (k, l). Read by name: ``scores.loglik``, or as a mapping of the computed metrics
    (``scores["loglik"]``, ``set(scores)``), in the registry's order."""

    loglik: np.ndarray
    accuracy: np.ndarray
    rank: np.ndarray
    entropy: np.ndarray
    extractable: np.ndarray | None = None
    extractable_len: np.ndarray | None = None
    sampled_logp: np.ndarray | None = None
    loglik_trained: np.ndarray | None = None
    accuracy_trained: np.ndarray | None = None

    def _computed(self) -> list[str]:
        return [name for name in registry.EXTRACTED if getattr(self, name, None) is not None]

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._computed():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` is CUDA when available, else Apple MPS, else CPU."""
    if device in ("auto", "", None):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise MemtuiError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:N or mps.") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise MemtuiError(f"device '{device}' requested but CUDA is not available here; use --device cpu.")
    return dev


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Dtype of the model body. ``auto``: bf16 on CUDA (fp16 where bf16 is unsupported), fp32 elsewhere."""
    if dtype in ("auto", "", None):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in _DTYPES:
        raise MemtuiError(f"unknown dtype '{dtype}'; use auto, float32, bfloat16 or float16.")
    return _DTYPES[dtype]


def default_chunks(device: torch.device, vocab: int) -> tuple[int, int]:
    """(positions per head matmul, positions per reduction pass).

    On CPU the matmul runs over ~100 MB of logits (large enough to be efficient) and the reductions over ~6 MB
    slices of it, which stay in cache across the four passes; on GPU both are one ~0.5 GB chunk.
    """
    if device.type == "cpu":
        return max(16, (96 << 20) // (4 * vocab)), max(8, (6 << 20) // (4 * vocab))
    n = max(256, (512 << 20) // (4 * vocab))
    return n, n


MICRO_TOKENS = 2048  # tokens per body call in the invariant path (rows of a micro-batch have one length)
MICRO_ROWS = 32  # at most this many rows per micro-batch: bounds the filler rows of a group's last micro-batch


def micro_rows(length: int) -> int:
    """Rows per body call for rows of ``length`` tokens in the invariant path: a function of the length alone (never
    of the batch), the largest power of two with at most ``MICRO_TOKENS`` tokens, between 1 and ``MICRO_ROWS``.
    Measured on CPU (4 x 128 GPT-NeoX, 65-token rows), micro-batches of 8 to 64 rows run as fast as one of 128."""
    m = max(1, MICRO_TOKENS // max(1, int(length)))
    return min(MICRO_ROWS, 1 << (m.bit_length() - 1))


def reduce_logits(
    z: torch.Tensor,
    targets: torch.Tensor,
    buf: torch.Tensor,
    sampling: tuple[int, float] | None = None,
    want: torch.Tensor | None = None,
) -> TokenStats:
    """Reduce fp32 logits ``z`` (P x V, overwritten) to the targets' logp, rank and entropy, each (P,), and with
    ``sampling`` = (top_k, temperature) their log-probability under that sampler; ``buf`` is P x V scratch. ``want``:
    the targets whose sampling probability is needed, a slice or a device tensor of indices (the others' is NaN);
    None: every target's. (Never a mask: finding its set bits makes the host wait for the device.)

    Four cache-friendly passes and no allocation of the size of ``z``: rank (compare into the fp32 scratch and sum,
    far faster than summing a bool tensor), max, shift-and-exp, and the dot products sum_v e_v z_v.
    """
    t = z.gather(1, targets[:, None])
    rank = torch.gt(z, t, out=buf).sum(1)
    m = z.amax(1, keepdim=True)
    z -= m  # every exp below is <= 1
    e = torch.exp(z, out=buf)
    s = e.sum(1)
    ez = torch.linalg.vecdot(e, z)  # sum_v e_v (z_v - m)
    log_s = torch.log(s)
    logp = (t - m).squeeze(1) - log_s
    entropy = log_s - ez / s
    slogp = None
    if sampling is not None and want is None:
        slogp = sampling_logp(z, (t - m).squeeze(1), rank, buf, *sampling)
    elif sampling is not None:  # the top-k pass only for the targets extractability reads: the rest stay NaN
        slogp = torch.full_like(logp, math.nan)
        tm = (t - m).squeeze(1)
        if isinstance(want, slice) and want.stop > want.start:  # a view: no copy, nothing waits for the device
            slogp[want] = sampling_logp(z[want], tm[want], rank[want], buf[: want.stop - want.start], *sampling)
        elif not isinstance(want, slice) and len(want):
            pick = [x.index_select(0, want) for x in (z, tm, rank)]
            slogp.index_copy_(0, want, sampling_logp(*pick, buf[: len(want)], *sampling))
    return TokenStats(logp=logp, rank=rank, entropy=entropy, slogp=slogp)


def _wanted(window: np.ndarray, a: int, b: int, device: torch.device) -> slice | torch.Tensor:
    """The entries of the sorted target indices ``window`` in [a, b), less a: a slice where they are consecutive (a
    row's window: no copy), else an index tensor on ``device``."""
    lo, hi = np.searchsorted(window, (a, b))
    part = window[lo:hi] - a
    if not len(part) or part[-1] - part[0] + 1 == len(part):
        return slice(int(part[0]), int(part[-1]) + 1) if len(part) else slice(0, 0)
    return torch.from_numpy(part).to(device, non_blocking=True)


def sampling_logp(
    z: torch.Tensor, t: torch.Tensor, rank: torch.Tensor, buf: torch.Tensor, top_k: int, temperature: float
) -> torch.Tensor:
    """Each target's log-probability under top-k sampling at ``temperature`` (the module's docstring): ``z`` the
    logits less their row maximum (P x V), ``t`` the target's, ``rank`` its rank; -inf outside the kept entries.
    The kept entries are the top_k largest and any tied with the k-th (one more comparison pass counts those)."""
    k = min(int(top_k), z.shape[1])
    top = torch.topk(z, k, dim=1, sorted=True).values  # row maxima are 0: every exp below is <= 1
    kth = top[:, -1:]
    ties = torch.ge(z, kth, out=buf).sum(1) - k  # entries equal to the k-th beyond the k that topk returned
    mass = torch.exp(top / temperature).sum(1) + ties * torch.exp(kth.squeeze(1) / temperature)
    slogp = t / temperature - torch.log(mass)
    return torch.where(rank < k, slogp, torch.full_like(slogp, -math.inf))


# devices whose scorer takes the batch-invariant path unless told otherwise: where it was measured bitwise invariant
# (CPU: tests/extract/test_batch_invariance.py; CUDA: an H100, benchmarks/gpu_extract.py, 1.03-1.33x the fast path's
# time with every metric: benchmarks/results/h100-2026-11-28)
INVARIANT_BY_DEFAULT = ("cpu", "cuda")


def scoring_way(device: torch.device, dtype: torch.dtype, batch_invariant: str = "auto") -> str:
    """How a worker on ``device`` with a ``dtype`` body and ``--batch-invariant`` auto/on/off scores, in the words a
    panel's ``checkpoints/scoring`` records (memtui.panel.scoring.describe)."""
    from memtui.panel.scoring import describe

    invariant = {"auto": device.type in INVARIANT_BY_DEFAULT, "on": True, "off": False}[batch_invariant]
    return describe(device.type, str(dtype), invariant)


def split_model(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(body returning ``last_hidden_state``, output head) of a Hugging Face causal LM."""
    body = getattr(model, "base_model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if body is None or body is model or head is None or not hasattr(head, "weight"):
        raise MemtuiError(
            f"cannot split {type(model).__name__} into a body and an output head; "
            "memtui scores Hugging Face causal language models (AutoModelForCausalLM)."
        )
    return body, head


class Scorer:
    """Scores token-id rows with one model object whose weights may be replaced between calls.

    The output head runs in fp32 (an fp32 copy of its weight is kept when the body is bf16/fp16; call
    :meth:`refresh_head` after copying new weights in). On CUDA with a bf16/fp16 body the head matmul may use TF32,
    which is exact for bf16/fp16-valued inputs and accumulates in fp32.

    ``invariant`` picks the fixed-shape path whose scores do not depend on the batch (see the module's docstring):
    ``None`` (default) = on CPU and CUDA, where it was measured bitwise invariant; MPS (not measured) keeps the padded
    fast path unless it is asked for.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        chunk: int | None = None,
        extractable: tuple[int, int] | None = None,
        invariant: bool | None = None,
        sampling: tuple[int, float] | None = (registry.SAMPLING_TOP_K, registry.SAMPLING_TEMPERATURE),
        goldfish=None,
    ):
        self.model = model
        self.goldfish = goldfish  # a memtui.orders.goldfish.Goldfish: the trained-target metrics too
        self.invariant = device.type in INVARIANT_BY_DEFAULT if invariant is None else bool(invariant)
        self.extractable = check_extractable(extractable) if extractable is not None else None
        # sampled_logp is one of the extractability metrics: computed with them, unless ``sampling`` is None
        self.sampling = check_sampling(sampling) if sampling is not None and self.extractable is not None else None
        self.device = device
        self.body, self.head = split_model(model)
        self.vocab = int(self.head.weight.shape[0])
        self.mm_chunk, self.red_chunk = default_chunks(device, self.vocab)
        if chunk:
            self.mm_chunk = self.red_chunk = int(chunk)
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.body_dtype = next(model.parameters()).dtype
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = self.body_dtype != torch.float32
        self._weight_t = self._bias = None
        self._bufs: tuple[torch.Tensor, torch.Tensor] | None = None
        self.refresh_head()

    def refresh_head(self) -> None:
        w = self.head.weight.detach()
        self._weight_t = (w if w.dtype == torch.float32 else w.float()).T
        b = getattr(self.head, "bias", None)
        self._bias = None if b is None else b.detach().float()

    def release(self) -> None:
        """Drop the scratch buffers (after an out-of-memory error)."""
        self._bufs = None

    def _buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._bufs is None:
            z = torch.empty(self.mm_chunk, self.vocab, dtype=torch.float32, device=self.device)
            buf = torch.empty(self.red_chunk, self.vocab, dtype=torch.float32, device=self.device)
            self._bufs = (z, buf)
        return self._bufs

    def window(self, lengths: np.ndarray) -> np.ndarray | None:
        """Which targets need a sampling probability, as indices into the targets of rows of ``lengths`` one after
        another (row r's targets 0 .. length - 2; target i predicts token i + 1): the (k, l) suffix window's, the
        only ones ``sampled_logp`` reads (``extractability``); None without sampling. Made on the host from the
        lengths, so that choosing them never waits for the device. The top-k pass for every other target was a
        tenth of the fast path's time on an H100 (the 1.4b shape: benchmarks/results/h100-2026-11-28)."""
        if self.sampling is None or self.extractable is None:
            return None
        k, ell = self.extractable
        targets = np.maximum(np.asarray(lengths, np.int64) - 1, 0)
        start = np.cumsum(targets) - targets
        ends = np.minimum(k - 1 + ell, targets)
        parts = [np.arange(s + k - 1, s + e, dtype=np.int64) for s, e in zip(start, ends, strict=True)]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def head_stats(self, h: torch.Tensor, y: torch.Tensor, window: np.ndarray | None = None) -> TokenStats:
        """Per-target logp (fp32), rank (int64) and entropy (fp32) of hidden states ``h`` (n x d) and targets ``y``;
        with sampling, the sampling log-probability of the targets ``window`` lists (sorted indices; default: every
        target)."""
        n = len(y)
        dev = h.device
        logp = torch.empty(n, dtype=torch.float32, device=dev)
        rank = torch.empty(n, dtype=torch.float32, device=dev)
        ent = torch.empty(n, dtype=torch.float32, device=dev)
        slogp = None if self.sampling is None else torch.empty(n, dtype=torch.float32, device=dev)
        zbuf, scratch = self._buffers()
        for s in range(0, n, self.mm_chunk):
            e = min(n, s + self.mm_chunk)
            z = zbuf[: e - s]
            hs = h[s:e].to(torch.float32)
            if self._bias is None:
                torch.mm(hs, self._weight_t, out=z)
            else:
                torch.addmm(self._bias, hs, self._weight_t, out=z)
            if self.softcap:
                z.div_(self.softcap).tanh_().mul_(self.softcap)
            for r in range(0, e - s, self.red_chunk):
                r2 = min(e - s, r + self.red_chunk)
                a, b = s + r, s + r2
                want = None if window is None else _wanted(window, a, b, dev)
                got = reduce_logits(z[r:r2], y[a:b], scratch[: r2 - r], self.sampling, want)
                logp[a:b], rank[a:b], ent[a:b] = got.logp, got.rank, got.entropy
                if slogp is not None:
                    slogp[a:b] = got.slogp
        return TokenStats(logp=logp, rank=rank.long(), entropy=ent, slogp=slogp)

    @torch.inference_mode()
    def token_stats(
        self, tokens: torch.Tensor, lengths: torch.Tensor, host_lengths: np.ndarray | None = None
    ) -> TokenStats:
        """Per-target stats for a right-padded batch, with each target's row index. ``host_lengths``: the lengths on
        the host, from which the sampling window is chosen (without them every target gets a sampling
        probability)."""
        b, L = tokens.shape
        pos = torch.arange(L, device=tokens.device)
        mask = pos[None, :] < lengths[:, None]
        ids = torch.where(mask, tokens, torch.zeros_like(tokens))
        attn = None if bool(mask.all()) else mask.long()
        hidden = self.body(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
        # position i predicts token i+1: a target exists where i+1 < length
        valid = (pos[None, : L - 1] + 1) < lengths[:, None]
        h = hidden[:, :-1][valid]
        del hidden
        y = ids[:, 1:][valid]
        rows = torch.arange(b, device=tokens.device)[:, None].expand(b, L - 1)[valid]
        stats = self.head_stats(h, y, None if host_lengths is None else self.window(host_lengths))
        return TokenStats(logp=stats.logp, rank=stats.rank, entropy=stats.entropy, rows=rows, slogp=stats.slogp)

    @torch.inference_mode()
    def row_stats(self, tokens: np.ndarray, lengths: np.ndarray) -> TokenStats:
        """What :meth:`token_stats` returns (rows one after another, in row order), by the invariant path: rows
        grouped by length, unpadded micro-batches of ``micro_rows(length)`` rows, the head per row."""
        per_row: list[TokenStats | None] = [None] * len(lengths)
        for length in np.unique(lengths[lengths >= 2]):
            group = np.flatnonzero(lengths == length)
            m = micro_rows(length)
            window = self.window(np.array([length]))
            for i in range(0, len(group), m):
                rows = group[i : i + m]
                ids = tokens[np.r_[rows, np.full(m - len(rows), rows[-1])], :length]  # filled up to m rows
                ids = torch.as_tensor(ids).to(self.device, non_blocking=True)
                hidden = self.body(input_ids=ids, use_cache=False).last_hidden_state
                for j, r in enumerate(rows):
                    per_row[r] = self.head_stats(hidden[j, :-1], ids[j, 1:], window)
        stats = [s for s in per_row if s is not None]
        if not stats:
            empty = torch.empty(0, device=self.device)
            slogp = None if self.sampling is None else empty
            return TokenStats(logp=empty, rank=empty.long(), entropy=empty, rows=empty.long(), slogp=slogp)
        counts = torch.as_tensor(np.maximum(np.asarray(lengths) - 1, 0))
        return TokenStats.cat(stats, rows=torch.repeat_interleave(torch.arange(len(lengths)), counts))

    def score(self, tokens: np.ndarray, lengths: np.ndarray) -> Scores:
        """The four panel metrics for each row (NaN for rows with fewer than two tokens), and with ``extractable``
        the extractability metrics (NaN for rows with fewer than k + l tokens)."""
        return self.score_tokens(tokens, lengths, ())[0]

    def score_tokens(self, tokens: np.ndarray, lengths: np.ndarray, keep) -> tuple[Scores, dict[int, np.ndarray]]:
        """:meth:`score`, and the per-target log-probabilities (fp32, length - 1 each) of the rows ``keep`` (indices
        into the batch): the per-token scores ``extract --token-scores`` stores, from the same pass."""
        b = len(tokens)
        tokens, lengths = np.asarray(tokens, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        if self.invariant:
            stats = self.row_stats(tokens, lengths)
        else:
            t = torch.as_tensor(tokens).to(self.device, non_blocking=True)
            stats = self.token_stats(t, torch.as_tensor(lengths).to(self.device), lengths)
        kept = {}
        if len(keep):
            logp = stats.logp.cpu().numpy()
            start = np.r_[0, np.cumsum(np.maximum(lengths - 1, 0))]
            kept = {int(r): logp[start[r] : start[r + 1]].copy() for r in keep}
        trained = None if self.goldfish is None else torch.from_numpy(self.goldfish.trained_targets(tokens, lengths))
        scores = per_instance(b, stats, extractable=self.extractable, sampling=self.sampling is not None,
                              trained=trained)  # fmt: skip
        return scores, kept


def check_extractable(kl) -> tuple[int, int]:
    """(k, l) as two positive ints; k >= 1 because nothing (no BOS) precedes the first token to predict it."""
    try:
        k, ell = (int(v) for v in kl)
    except (TypeError, ValueError):
        raise MemtuiError(f"extractable takes two whole numbers K,L (prefix and suffix tokens), not {kl!r}.") from None
    if k < 1 or ell < 1:
        raise MemtuiError(f"extractable K,L must both be at least 1, got {k},{ell}.")
    return k, ell


def check_sampling(sampling) -> tuple[int, float]:
    """(top_k, temperature): a whole number >= 1 and a finite number > 0."""
    try:
        top_k, temperature = int(sampling[0]), float(sampling[1])
    except (TypeError, ValueError, IndexError):
        raise MemtuiError(f"a sampling scheme is (top_k, temperature), not {sampling!r}.") from None
    if top_k < 1 or not math.isfinite(temperature) or temperature <= 0:
        raise MemtuiError(f"a sampling scheme needs top_k >= 1 and a temperature > 0, got {top_k}, {temperature}.")
    return top_k, temperature


def extractability(
    count: torch.Tensor, top1: torch.Tensor, k: int, ell: int, slogp: torch.Tensor | None = None
) -> dict[str, np.ndarray]:
    """(k, l)-extractability per row from the per-target top-1 flags (CPU tensors): ``count`` targets per row, and
    ``top1`` for every target, rows one after another in row order (as ``token_stats`` returns them).

    Target j (0-based) of a row is its token j + 2 (1-based), so the suffix tokens k+1..k+l are targets k-1..k+l-2:
    one gather of b x l flags, never a pass over every target. ``extractable_len`` = the length of the leading run of
    top-1 flags in the suffix (a cumulative product), ``extractable`` = [len == l].
    """
    start = torch.cumsum(count, 0) - count
    full = count >= k + ell - 1  # at least k + l tokens: the whole suffix is there
    idx = torch.where(full[:, None], start[:, None] + (k - 1) + torch.arange(ell)[None, :], 0)
    flags = top1[idx] if len(top1) else torch.zeros(idx.shape, dtype=torch.bool)
    out_len = flags.to(torch.int64).cumprod(1).sum(1).numpy().astype(np.float64)
    out_len[~full.numpy()] = math.nan
    extractable = np.where(np.isnan(out_len), math.nan, out_len == ell)
    out = {"extractable": extractable, "extractable_len": out_len}
    if slogp is not None:
        # the product of the suffix targets' sampling probabilities, as a sum of logs in float64 (a -inf among
        # them, a token outside the top k, makes the sum -inf), floored
        total = (slogp[idx].to(torch.float64) if len(slogp) else torch.zeros(idx.shape, dtype=torch.float64)).sum(1)
        sampled = np.maximum(total.numpy(), registry.SAMPLED_LOGP_FLOOR)
        sampled[~full.numpy()] = math.nan
        out["sampled_logp"] = sampled
    return out


def per_instance(
    b: int,
    stats: TokenStats,
    extractable: tuple[int, int] | None = None,
    sampling: bool = False,
    trained: torch.Tensor | None = None,
) -> Scores:
    """Sum / mean per-target quantities into per-row metrics (float64 accumulation); with ``trained`` (a bool per
    target, in the targets' order) the trained-target metrics too.

    Done on the CPU (a few MB per batch): deterministic, unlike float64 atomics on CUDA, and MPS has no float64.
    """
    rows, logp, rank, ent = (x.cpu() for x in (stats.rows, stats.logp, stats.rank, stats.entropy))
    dev = logp.device

    def total(x):
        return torch.zeros(b, dtype=torch.float64, device=dev).index_add_(0, rows, x.to(torch.float64))

    count = total(torch.ones_like(logp))
    top1 = rank == 0  # accuracy's flags, and extractability's

    with np.errstate(invalid="ignore", divide="ignore"):
        n = count.cpu().numpy()
        out = {
            "loglik": total(logp).cpu().numpy(),
            "accuracy": total(top1).cpu().numpy() / n,
            "rank": total(rank).cpu().numpy() / n,
            "entropy": total(ent).cpu().numpy() / n,
        }
    out["loglik"][n == 0] = math.nan
    if extractable is not None:
        slogp = stats.slogp.cpu() if sampling and stats.slogp is not None else None
        out.update(extractability(count.to(torch.int64), top1, *extractable, slogp=slogp))  # counts exact in float64
    if trained is not None:
        if len(trained) != len(logp):
            raise MemtuiError(f"{len(trained)} trained flags for {len(logp)} targets: the mask and the rows disagree.")
        keep = trained.to(dev)
        n_kept = total(keep).numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            out["loglik_trained"] = total(torch.where(keep, logp, torch.zeros_like(logp))).numpy()
            out["accuracy_trained"] = total(top1 & keep).numpy() / n_kept
        out["loglik_trained"][n_kept == 0] = math.nan
    return Scores(**out)


def check_head(model: torch.nn.Module, scorer: Scorer, vocab: int) -> None:
    """Guard against architectures whose logits are not ``head(base_model(x))`` (extra scaling, etc.)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (1, 8), generator=g).to(scorer.device)
    with torch.inference_mode():
        ref = torch.log_softmax(model(input_ids=x).logits[0, :-1].float(), -1)
        ref = ref.gather(1, x[0, 1:, None]).squeeze(1)
        logp = scorer.token_stats(x, torch.tensor([8], device=scorer.device)).logp
    tol = 1e-3 if scorer.body_dtype == torch.float32 else 5e-2
    if not torch.allclose(logp, ref, atol=tol, rtol=tol):
        raise MemtuiError(
            f"{type(model).__name__}: memtui's chunked output head does not reproduce the model's own logits "
            f"(max difference {float((logp - ref).abs().max()):.3g}); this architecture is not supported yet."
        )
