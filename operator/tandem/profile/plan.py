"""What ``tandem profile`` sends: the sweep of points and each request's prompt. Pure.

Two kinds of point, each a few repetitions of a wave of requests sent together:

* **prefill** — one prompt at a time (concurrency 1), ``max_tokens`` 1, prompt lengths
  doubling (quadrupling with ``--quick``) from 16 tokens to the longest the engine
  takes: how the time to first token grows with the prompt;
* **decode** — waves of 1, 2, 4, ... concurrent requests (up to the engine's
  ``max_num_seqs``) with short prompts and ``output_tokens`` each: how the step time
  grows with the batch; a few waves again at a long context, with outputs long enough
  that steady decoding outlasts the prompts' prefill: how it grows with the KV read.

Prompts are token ids (exact lengths whatever the tokenizer), drawn from a seed, distinct
from one request to the next so that no prefix cache shortens a prefill.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

PointKind = Literal["prefill", "decode"]
#: Token ids prompts are drawn from: ordinary ids of any real tokenizer (special tokens
#: sit at the ends of vocabularies), and within the tiny test model's 512.
PROMPT_IDS = (10, 500)


@dataclass(frozen=True)
class PointSpec:
    """One point of the sweep: ``repeats`` waves of ``concurrency`` requests."""

    kind: PointKind
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    repeats: int

    @property
    def requests(self) -> int:
        return self.concurrency * self.repeats

    @property
    def label(self) -> str:
        if self.kind == "prefill":
            return f"prefill {self.prompt_tokens} tokens"
        return f"decode batch {self.concurrency} at {self.prompt_tokens}+{self.output_tokens}"


@dataclass(frozen=True)
class SweepLimits:
    """What the engine takes: the sweep stays within it."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_concurrency: int = 256
    """The largest wave (also capped by ``max_num_seqs``)."""


def geometric(start: int, stop: int, factor: int) -> list[int]:
    """``start``, ``start x factor``, ... up to ``stop``, with ``stop`` itself last.

    >>> geometric(16, 2000, 4)
    [16, 64, 256, 1024, 2000]
    >>> geometric(1, 8, 2)
    [1, 2, 4, 8]
    """
    out = []
    value = start
    while value < stop:
        out.append(value)
        value *= factor
    return [*out, stop] if stop >= start else out


def build_sweep(limits: SweepLimits, quick: bool = False) -> list[PointSpec]:
    """The points, prefill first, then decode by growing batch.

    The decode waves' prompts are short enough that a whole wave's prompts fit one token
    budget (``max_num_batched_tokens``): every request then decodes in one batch from its
    second token on, which is what a decode point measures.

    >>> [p.label for p in build_sweep(SweepLimits(2048, 16, 2048), quick=True)][:3]
    ['prefill 16 tokens', 'prefill 64 tokens', 'prefill 256 tokens']
    """
    longest = max(16, min(limits.max_model_len - 8, 8192))
    factor, prefill_repeats = (4, 3) if quick else (2, 5)
    lengths = geometric(16, longest, factor)
    points = [PointSpec("prefill", n, 1, 1, prefill_repeats) for n in lengths]
    top = max(1, min(limits.max_num_seqs, limits.max_concurrency))
    output = max(2, min(32 if quick else 64, limits.max_model_len // 4))
    short = max(8, min(64, limits.max_num_batched_tokens // top - 1,
                       limits.max_model_len - output - 1))  # fmt: skip
    decode_repeats = 2 if quick else 3
    batches = geometric(1, top, 4 if quick else 2)
    points += [PointSpec("decode", short, output, b, decode_repeats) for b in batches]
    long_context = min(1024, (limits.max_model_len - output) // 2)
    if long_context > 4 * short:
        wide = [1, top] if quick else sorted({1, max(1, top // 4), top})
        for b in wide:
            # The wave's prompts take several budgets to prefill, mixed with the first
            # decode steps; enough tokens after that make the steady decode of a long
            # context (where the KV read shows) most of each request's time.
            chunks = -(-b * long_context // limits.max_num_batched_tokens)
            room = limits.max_model_len - long_context - 1
            tokens = max(output, min(256, 8 * chunks, room))
            points.append(PointSpec("decode", long_context, tokens, b, decode_repeats))
    return points


def build_warmup(points: list[PointSpec]) -> list[PointSpec]:
    """One short wave per distinct shape, sent before the measured ones and not kept: a
    fresh engine is slow the first time it sees a batch shape (vLLM compiles for it)."""
    seen: dict[tuple[str, int, int], PointSpec] = {}
    for p in points:
        key = (p.kind, p.prompt_tokens, p.concurrency)
        seen.setdefault(key, PointSpec(p.kind, p.prompt_tokens, min(p.output_tokens, 4),
                                       p.concurrency, 1))  # fmt: skip
    return list(seen.values())


def build_prompt(seed: int, tokens: int) -> list[int]:
    """A prompt of ``tokens`` token ids drawn from ``seed`` (one seed per request).

    >>> build_prompt(7, 4) == build_prompt(7, 4) != build_prompt(8, 4)
    True
    """
    rng = random.Random(seed)
    return [rng.randrange(*PROMPT_IDS) for _ in range(tokens)]
