"""Deterministic stand-ins for a tokenizer: token counts, prefix hashes, output text. Pure.

No real tokenizer ships with the simulator, so text is measured as one token per four
UTF-8 bytes (rounded up), a common rule of thumb for English with Llama tokenizers. Output
tokens are four-character words (a space and three letters) drawn from a fixed vocabulary
by a hash of (seed, position), so the same request and seed give the same text, and the
output measured by the same rule has exactly as many tokens as were generated.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

BYTES_PER_TOKEN = 4
#: chat-template overhead (Llama 3 style): begin-of-text, per message header + end-of-turn,
#: and the assistant header that opens generation
CHAT_BOS_TOKENS = 1
CHAT_TOKENS_PER_MESSAGE = 5
CHAT_GENERATION_PROMPT_TOKENS = 4

VOCAB: tuple[str, ...] = tuple(
    " " + a + b + c for a in "bcdfghklmnprstvw" for b in "aeiou" for c in "nrstlmdk"
)  # 640 words


def count_text_tokens(text: str) -> int:
    """Approximate token count of ``text``: ceil(UTF-8 bytes / 4), at least 1."""
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def message_text(content: Any) -> str:
    """The text of a chat message's ``content`` (a string or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    raise ValueError("message content must be a string or a list of parts")


def render_chat(messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """(rendered prompt text used for prefix hashing, prompt token count)."""
    pieces = []
    tokens = CHAT_BOS_TOKENS + CHAT_GENERATION_PROMPT_TOKENS
    for msg in messages:
        body = message_text(msg.get("content"))
        pieces.append(f"<{msg.get('role', '')}>{body}")
        tokens += CHAT_TOKENS_PER_MESSAGE + (count_text_tokens(body) if body else 0)
    return "".join(pieces), tokens


def text_block_hashes(text: str, block_size: int, num_tokens: int) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks (``block_size`` tokens = 4x bytes each)."""
    data = text.encode("utf-8")
    span = block_size * BYTES_PER_TOKEN
    full = min(len(data) // span, num_tokens // block_size)
    out = []
    prev = 0
    for i in range(full):
        prev = hash((prev, data[i * span : (i + 1) * span]))
        out.append(prev)
    return tuple(out)


def token_block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of full blocks of a token-id prompt."""
    out = []
    prev = 0
    for i in range(len(token_ids) // block_size):
        prev = hash((prev, tuple(token_ids[i * block_size : (i + 1) * block_size])))
        out.append(prev)
    return tuple(out)


def choice_seed(
    seed: int | None, greedy: bool, prompt_key: str, index: int, fresh: random.Random
) -> int:
    """The seed of one choice's output, as vLLM samples: greedy output depends on the
    prompt alone; a ``seed`` fixes the output of each (prompt, choice) (vLLM gives choice
    i of ``n`` the seed ``seed + i``); otherwise every request draws afresh."""
    if greedy:
        key = prompt_key
    elif seed is not None:
        key = f"{seed + index}\x00{prompt_key}"
    else:
        return fresh.getrandbits(64)
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def token_prompt_text(token_ids: Sequence[int]) -> str:
    """The sim's text for a token-id prompt (what ``echo`` prints): one word per id."""
    return "".join([VOCAB[t % len(VOCAB)] for t in token_ids])


def token_text(seed: int, index: int) -> str:
    """The ``index``-th output token's text for ``seed`` (deterministic)."""
    x = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    return VOCAB[x % len(VOCAB)]


def output_text(seed: int, start: int, stop: int) -> str:
    """Text of output tokens ``start``..``stop - 1``."""
    return "".join([token_text(seed, i) for i in range(start, stop)])


def eos_position(seed: int, mean_tokens: int) -> int | None:
    """Where the simulated model stops on its own (geometric-like, mean ``mean_tokens``);
    None when ``mean_tokens`` is 0 (never stops before ``max_tokens``)."""
    if mean_tokens <= 0:
        return None
    x = (seed * 0xD1B54A32D192ED03 + 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF
    u = ((x >> 11) + 1) / float(1 << 53)  # (0, 1]
    return max(1, round(-math.log(u) * mean_tokens))


#: The sim tokenizer's special tokens (ids 0-5) and chat roles (ids 8-13); the ids of its
#: text pieces are 256 and above, so the two never meet.
SPECIAL_TOKENS: tuple[str, ...] = ("<|bos|>", "<|eos|>", "<|start|>", "<|end|>", "<|sep|>", "\n")
BOS_ID, START_ID, END_ID, SEP_ID, NEWLINE_ID = 0, 2, 3, 4, 5
ROLE_IDS = {"system": 8, "user": 9, "assistant": 10, "tool": 11, "developer": 12}
OTHER_ROLE_ID = 13
_ROLES_BY_ID = {v: k for k, v in ROLE_IDS.items()}


def encode_text(text: str) -> list[int]:
    """Token ids of ``text`` as the sim counts it: one per four UTF-8 bytes, each id the
    bytes themselves behind a marker byte, so :func:`decode_tokens` gives the text back.

    >>> encode_text("Hello there")
    [5509573740, 6159365224, 23425637]
    >>> decode_tokens(encode_text("Hello there"))
    'Hello there'
    """
    data = text.encode("utf-8")
    pieces = (data[i : i + BYTES_PER_TOKEN] for i in range(0, len(data), BYTES_PER_TOKEN))
    return [int.from_bytes(b"\x01" + piece, "big") for piece in pieces]


def token_piece(token_id: int) -> bytes:
    """The bytes of one token id (a special token's or role's name for small ids)."""
    if token_id < len(SPECIAL_TOKENS):
        return SPECIAL_TOKENS[token_id].encode()
    if token_id < 256:
        return _ROLES_BY_ID.get(token_id, "").encode()
    return token_id.to_bytes((token_id.bit_length() + 7) // 8, "big")[1:]


def decode_tokens(token_ids: Sequence[int]) -> str:
    """The text of token ids (bytes joined first, so a character split across two tokens
    comes back whole)."""
    return b"".join(token_piece(t) for t in token_ids).decode("utf-8", "replace")


def encode_chat(messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True
                ) -> list[int]:  # fmt: skip
    """Token ids of a conversation in the sim's template: as many as :func:`render_chat`
    counts (bos, five per message around its text, four for the generation prompt).

    >>> len(encode_chat([{"role": "user", "content": "Hello there"}]))
    13
    """
    ids = [BOS_ID]
    for msg in messages:
        role = ROLE_IDS.get(str(msg.get("role", "")), OTHER_ROLE_ID)
        body = message_text(msg.get("content"))
        ids += [START_ID, role, SEP_ID, NEWLINE_ID, *encode_text(body), END_ID]
    if add_generation_prompt:
        ids += [START_ID, ROLE_IDS["assistant"], SEP_ID, NEWLINE_ID]
    return ids
