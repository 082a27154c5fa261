"""Tokenizer stand-ins, request parsing and SSE chunk shapes (pure helpers of the server)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from tandem.engine.model import VirtualClock
from tandem.engine.server.errors import ApiError
from tandem.engine.server.protocol import parse_body
from tandem.engine.server.realtime import AsyncioClock
from tandem.engine.server.responses import ChunkFormatter
from tandem.engine.server.text import (
    choice_seed,
    count_text_tokens,
    eos_position,
    output_text,
    render_chat,
    text_block_hashes,
    token_block_hashes,
)


def test_token_count_is_bytes_over_four() -> None:
    assert count_text_tokens("") == 1
    assert count_text_tokens("abcd") == 1
    assert count_text_tokens("abcde") == 2
    assert count_text_tokens("é" * 4) == 2  # UTF-8 bytes, not characters
    text = output_text(7, 0, 25)
    assert count_text_tokens(text) == 25  # generated text measures as what was generated


def test_chat_template_overhead() -> None:
    _, tokens = render_chat([{"role": "user", "content": "abcd"}])
    assert tokens == 1 + 5 + 1 + 4
    _, parts = render_chat([{"role": "user", "content": [{"type": "text", "text": "abcd"}]}])
    assert parts == tokens


def test_prefix_hashes_chain_over_full_blocks() -> None:
    a = text_block_hashes("x" * 200, 16, 50)
    b = text_block_hashes("x" * 128 + "y" * 72, 16, 50)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    ids = list(range(40))
    assert len(token_block_hashes(ids, 16)) == 2
    assert token_block_hashes(ids, 16)[0] == token_block_hashes(ids[:16], 16)[0]


def test_seed_and_eos_are_deterministic() -> None:
    fresh = random.Random(1)
    seeded = choice_seed(5, False, "p", 0, fresh)
    assert seeded == choice_seed(5, False, "p", 0, fresh) != choice_seed(5, False, "q", 0, fresh)
    assert choice_seed(5, False, "p", 1, fresh) == choice_seed(6, False, "p", 0, fresh)
    greedy = choice_seed(None, True, "p", 0, fresh)
    assert greedy == choice_seed(7, True, "p", 0, fresh) != choice_seed(None, True, "q", 0, fresh)
    # unseeded sampling draws afresh every time, as vLLM does
    assert choice_seed(None, False, "p", 0, fresh) != choice_seed(None, False, "p", 0, fresh)
    assert output_text(1, 0, 10) == output_text(1, 0, 4) + output_text(1, 4, 10)
    assert eos_position(1, 0) is None
    lengths = [eos_position(seed, 100) for seed in range(400)]
    assert all(n is not None and n >= 1 for n in lengths)
    mean = sum(n for n in lengths if n is not None) / len(lengths)
    assert 70 < mean < 130


def test_parse_completion_and_chat() -> None:
    req = parse_body("completion", {"prompt": [[1, 2, 3]], "priority": 2, "seed": 9}, 16)
    assert (req.prompt_tokens, req.priority, req.seed, req.max_tokens) == (3, 2, 9, 16)
    chat = parse_body(
        "chat",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        16,
    )
    assert chat.max_tokens == 4 and chat.stream and chat.include_usage
    assert (
        parse_body("chat", {"messages": [{"role": "user", "content": "x"}]}, 16).max_tokens is None
    )
    lax = parse_body(
        "completion", {"prompt": "x", "n": "2", "stream": "yes", "max_tokens": 3.0}, 16
    )
    assert (lax.n, lax.stream, lax.max_tokens) == (2, True, 3)  # pydantic's lax mode, as vLLM
    for bad in ({"prompt": "x", "n": "two"}, {"prompt": 5}, {"prompt": "x", "stream": "maybe"}):
        with pytest.raises(ApiError) as info:
            parse_body("completion", bad, 16)
        assert info.value.status == 400


def test_sse_chunks_are_vllm_shaped() -> None:
    fmt = ChunkFormatter("chat", "chatcmpl-1", 123, "m")
    first = json.loads(fmt.role_chunk()[6:])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tok = json.loads(fmt.token_chunk(' he said "hi"')[6:])
    assert tok["object"] == "chat.completion.chunk" and tok["id"] == "chatcmpl-1"
    assert tok["choices"][0]["delta"]["content"] == ' he said "hi"'
    last = json.loads(fmt.full_chunk(" end", "length", kv_transfer_params={"a": 1})[6:])
    assert last["choices"][0]["finish_reason"] == "length" and last["kv_transfer_params"] == {
        "a": 1
    }
    usage = json.loads(fmt.usage_chunk({"prompt_tokens": 1})[6:])
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 1}
    comp = json.loads(ChunkFormatter("completion", "cmpl-2", 1, "m").token_chunk("x")[6:])
    assert comp["object"] == "text_completion" and comp["choices"][0]["text"] == "x"


async def test_clocks() -> None:
    virtual = VirtualClock(10.0)
    await virtual.sleep_until(12.5)
    virtual.advance_to(11.0)  # never backwards
    assert virtual.now_s() == 12.5
    fast = AsyncioClock(speedup=100.0)
    start = fast.now_s()
    loop = asyncio.get_running_loop()
    wall = loop.time()
    await fast.sleep_until(start + 2.0)  # 2 simulated seconds = 20 ms of wall time
    assert fast.now_s() >= start + 2.0
    assert loop.time() - wall < 1.0
    with pytest.raises(ValueError):
        AsyncioClock(0)
