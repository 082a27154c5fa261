"""Ask an engine every question the engine contract cares about and record the answers.
Does I/O: HTTP to the engines given (loopback), and, as a script, starts engines.

``survey_engine(url)`` sends each request of :data:`CASES` (and a few sequences: stop
strings, seeds, an aborted stream) and returns ``{case: {"status", "headers", "body"}}``
with the bodies as received (JSON parsed, SSE split into events). ``survey_pd`` does the
same for a prefill/decode pair. Run as a script, it starts real vLLM (aggregated, prefill,
decode) and ``tandem engine sim`` with the same roles, surveys both and writes one JSON
file: the raw material of ``docs/vllm-differences.md`` and of the contract tests::

    .venv/bin/python -m tests.vllm.survey survey.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

Json = dict[str, Any]
MODEL = "tiny-llama"
LONG_PROMPT = "the quick brown fox jumps over the lazy dog " * 400  # ~3600 tokens

Case = tuple[str, str, Any, dict[str, str]]


def completion(headers: dict[str, str] | None = None, **body: Any) -> Case:
    return ("POST", "/v1/completions", {"model": MODEL, **body}, headers or {})


def chat(content: str = "Hi", headers: dict[str, str] | None = None, **body: Any) -> Case:
    messages = [{"role": "user", "content": content}]
    return ("POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, **body},
            headers or {})  # fmt: skip


STREAM: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}

#: name -> (method, path, body or raw bytes, extra headers)
CASES: dict[str, Case] = {
    "health": ("GET", "/health", None, {}),
    "ping_get": ("GET", "/ping", None, {}),
    "ping_post": ("POST", "/ping", None, {}),
    "version": ("GET", "/version", None, {}),
    "models": ("GET", "/v1/models", None, {}),
    "load": ("GET", "/load", None, {}),
    "tokenize_prompt": ("POST", "/tokenize", {"model": MODEL, "prompt": "Hello there"}, {}),
    "tokenize_chat": ("POST", "/tokenize", chat("Hello there")[2], {}),
    "detokenize": ("POST", "/detokenize", {"model": MODEL, "tokens": [0, 44, 351, 83]}, {}),
    "completion": completion(prompt="Hello there", max_tokens=5),
    "chat": chat("Hello there", max_completion_tokens=5),
    "completion_stream": completion(prompt="Hello there", max_tokens=3, **STREAM),
    "chat_stream": chat("Hello there", max_tokens=3, **STREAM),
    "chat_stream_no_usage": chat(max_tokens=2, stream=True),
    "completion_n2": completion(prompt="Hi", max_tokens=3, n=2),
    "chat_n2": chat(max_tokens=3, n=2),
    "completion_logprobs": completion(prompt="Hi", max_tokens=2, logprobs=2),
    "chat_logprobs": chat(max_tokens=2, logprobs=True, top_logprobs=2),
    "request_id_header": completion(
        prompt="Hi", max_tokens=1, headers={"X-Request-Id": "survey-req-1"}
    ),
    "request_id_header_chat": chat(max_tokens=1, headers={"X-Request-Id": "survey-req-2"}),
    "err_unknown_model": completion(model="nope", prompt="Hi", max_tokens=1),
    "err_unknown_model_chat": chat(model="nope", max_tokens=1),
    "no_model_field": ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1}, {}),
    "err_prompt_too_long": completion(prompt=LONG_PROMPT, max_tokens=1),
    "err_prompt_too_long_chat": chat(LONG_PROMPT, max_tokens=1),
    "max_tokens_over_max_model_len": completion(prompt="Hi", max_tokens=5000),
    "prompt_plus_max_tokens_over": completion(prompt="Hello there", max_tokens=2046),
    "err_malformed_json": ("POST", "/v1/completions", b'{"model": "tiny-llama", "prompt": ', {}),
    "err_malformed_json_chat": ("POST", "/v1/chat/completions", b"{not json", {}),
    "err_max_tokens_string": completion(prompt="Hi", max_tokens="ten"),
    "err_messages_string": ("POST", "/v1/chat/completions", {"model": MODEL, "messages": "hi"}, {}),
    "err_prompt_missing": completion(max_tokens=1),
    "err_n_zero": completion(prompt="Hi", n=0),
    "err_temperature_negative": completion(prompt="Hi", max_tokens=1, temperature=-1),
    "err_max_tokens_zero": completion(prompt="Hi", max_tokens=0),
    "err_max_tokens_negative": completion(prompt="Hi", max_tokens=-1),
    "err_stream_options_without_stream": completion(
        prompt="Hi", max_tokens=1, stream_options={"include_usage": True}
    ),
    "unknown_field": completion(prompt="Hi", max_tokens=1, bogus=1),
    "kv_params_on_aggregated": completion(
        prompt="Hi", max_tokens=1, kv_transfer_params={"do_remote_decode": True}
    ),
    "not_found_path": ("GET", "/v1/nothing", None, {}),
    "wrong_method": ("GET", "/v1/completions", None, {}),
}

KEPT_HEADERS = ("content-type", "x-request-id", "transfer-encoding")


async def call(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> Json:
    """One request; the answer as ``{"status", "headers", "body"}`` (SSE: ``events``)."""
    kwargs: dict[str, Any] = {"headers": dict(headers or {})}
    if isinstance(body, bytes):
        kwargs["data"] = body
        kwargs["headers"]["Content-Type"] = "application/json"
    elif body is not None:
        kwargs["json"] = body
    started = time.monotonic()
    async with session.request(
        method, url + path, timeout=aiohttp.ClientTimeout(total=timeout_s), **kwargs
    ) as resp:
        raw = await resp.read()
        out: Json = {
            "status": resp.status,
            "headers": {k: v for k, v in resp.headers.items() if k.lower() in KEPT_HEADERS},
            "elapsed_s": round(time.monotonic() - started, 3),
        }
    text = raw.decode(errors="replace")
    if out["headers"].get("Content-Type", "").startswith("text/event-stream"):
        out["events"] = [parse_event(e) for e in text.split("\n\n") if e.strip()]
    else:
        try:
            out["body"] = json.loads(text)
        except ValueError:
            out["body"] = text
    return out


def parse_event(event: str) -> Any:
    data = event.removeprefix("data: ")
    try:
        return json.loads(data)
    except ValueError:
        return data


def summarize_metrics(text: str) -> dict[str, Json]:
    """``{family: {"type", "samples": [sample names], "labels": [label names]}}``."""
    out: dict[str, Json] = {}
    for family in text_string_to_metric_families(text):
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        names = sorted({s.name for s in family.samples})
        out[family.name] = {"type": family.type, "samples": names, "labels": labels}
    return out


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def metrics_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url + "/metrics") as resp:
        return await resp.text()


async def survey_engine(url: str) -> Json:
    """Every case of :data:`CASES`, then the stop, seed and abort sequences."""
    out: Json = {}
    async with aiohttp.ClientSession() as session:
        for name, (method, path, body, headers) in CASES.items():
            try:
                out[name] = await call(session, url, method, path, body, headers)
            except (aiohttp.ClientError, TimeoutError) as err:
                out[name] = {"error": repr(err)}
        out["metrics"] = summarize_metrics(await metrics_text(session, url))
        out["stop"] = await survey_stop(session, url)
        out["seed"] = await survey_seed(session, url)
        out["abort"] = await survey_abort(session, url)
    return out


async def survey_stop(session: aiohttp.ClientSession, url: str) -> Json:
    """Greedy text, then the same request with a piece of that text as a stop string."""
    body = {"model": MODEL, "prompt": "Tell me", "max_tokens": 12, "temperature": 0}
    first = await call(session, url, "POST", "/v1/completions", body)
    text = first["body"]["choices"][0]["text"]
    stop = text[4:6] if len(text) >= 6 else text[-1:]
    second = await call(session, url, "POST", "/v1/completions", {**body, "stop": [stop]})
    return {"greedy": first, "stop_string": stop, "stopped": second}


async def survey_seed(session: aiohttp.ClientSession, url: str) -> Json:
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 8, "temperature": 1.0}
    texts = {}
    for label, seed in (("seed7_a", 7), ("seed7_b", 7), ("seed8", 8)):
        answer = await call(session, url, "POST", "/v1/completions", {**body, "seed": seed})
        texts[label] = answer["body"]["choices"][0]["text"]
    return texts


async def survey_abort(session: aiohttp.ClientSession, url: str) -> Json:
    """A long stream cut after three events: does the engine stop the request?"""
    before = await metrics_text(session, url)
    body = {"model": MODEL, "prompt": "Go", "max_tokens": 1500, "stream": True,
            "ignore_eos": True}  # fmt: skip
    seen = 0
    async with session.post(url + "/v1/completions", json=body) as resp:
        async for line in resp.content:
            if line.startswith(b"data:"):
                seen += 1
            if seen >= 3:
                break
        resp.close()
    running_after: list[float] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        text = await metrics_text(session, url)
        running_after.append(metric_sum(text, "vllm:num_requests_running"))
        if running_after[-1] == 0:
            break
        await asyncio.sleep(0.25)
    after = await metrics_text(session, url)
    key = "vllm:request_success_total"
    return {
        "events_read": seen,
        "running_polls": running_after,
        "abort_delta": metric_sum(after, key, finished_reason="abort")
        - metric_sum(before, key, finished_reason="abort"),
        "generation_tokens_delta": metric_sum(after, "vllm:generation_tokens_total")
        - metric_sum(before, "vllm:generation_tokens_total"),
    }


async def survey_pd(prefill_url: str, decode_url: str) -> Json:
    """The two legs of a handoff, their metrics, and the failure cases of each leg."""
    prompt = "Disaggregated serving moves the cache from one engine to another. " * 3
    out: Json = {}
    async with aiohttp.ClientSession() as session:
        out["tokenized"] = await call(
            session, prefill_url, "POST", "/tokenize", {"model": MODEL, "prompt": prompt}
        )
        before = {u: await metrics_text(session, u) for u in (prefill_url, decode_url)}
        kv_request = {"do_remote_decode": True, "do_remote_prefill": False,
                      "remote_engine_id": None, "remote_block_ids": None,
                      "remote_host": None, "remote_port": None}  # fmt: skip
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1,
                "kv_transfer_params": kv_request}  # fmt: skip
        headers = {"X-Request-Id": "survey-pd-1"}
        p = await call(session, prefill_url, "POST", "/v1/completions", body, headers)
        out["prefill"] = p
        params = p["body"].get("kv_transfer_params") if isinstance(p["body"], dict) else None
        decode_body = {"model": MODEL, "prompt": prompt, "max_tokens": 4,
                       "kv_transfer_params": params}  # fmt: skip
        out["decode"] = await call(
            session, decode_url, "POST", "/v1/completions", decode_body, headers
        )
        after = {u: await metrics_text(session, u) for u in (prefill_url, decode_url)}
        out["by_source_delta"] = {
            role: {
                source: metric_sum(after[u], "vllm:prompt_tokens_by_source_total", source=source)
                - metric_sum(before[u], "vllm:prompt_tokens_by_source_total", source=source)
                for source in ("local_compute", "local_cache_hit", "external_kv_transfer")
            }
            for role, u in (("prefill", prefill_url), ("decode", decode_url))
        }
        out["prefill_metrics"] = summarize_metrics(after[prefill_url])
        out["decode_metrics"] = summarize_metrics(after[decode_url])
        out["prefill_stream"] = await call(
            session, prefill_url, "POST", "/v1/completions",
            {**body, "stream": True, "prompt": "A streamed prefill leg"},
        )  # fmt: skip
        out["chat_prefill"] = await call(
            session, prefill_url, "POST", "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
             "kv_transfer_params": kv_request},
        )  # fmt: skip
        if params:
            bogus = {**params, "remote_engine_id": "no-such-engine", "remote_block_ids": [[1, 2]]}
            out["decode_bad_engine_id"] = await call(
                session, decode_url, "POST", "/v1/completions",
                {**decode_body, "prompt": "A different prompt", "kv_transfer_params": bogus},
                timeout_s=90,
            )  # fmt: skip
            unreachable = {**params, "remote_port": 1, "remote_engine_id": "unreachable"}
            try:
                out["decode_unreachable_peer"] = await call(
                    session, decode_url, "POST", "/v1/completions",
                    {**decode_body, "prompt": "Another one", "kv_transfer_params": unreachable},
                    timeout_s=90,
                )  # fmt: skip
            except (aiohttp.ClientError, TimeoutError) as err:
                out["decode_unreachable_peer"] = {"error": repr(err)}
    return out


async def _spawn_sims(roles: dict[str, str]) -> tuple[dict[str, str], list[Any]]:
    """``tandem engine sim`` per role on free ports, with the same served name and length."""
    from tests.vllm.engines import free_port

    urls: dict[str, str] = {}
    procs = []
    for name, role in roles.items():
        port = free_port()
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tandem.cli", "engine", "sim", "--role", role,
                "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL,
                "--max-model-len", "2048", "--speedup", "20",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
        )  # fmt: skip
        urls[name] = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        for url in urls.values():
            for _ in range(200):
                try:
                    async with session.get(url + "/health") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
    return urls, procs


async def survey_both(out: Path, log_dir: Path) -> None:
    from tests.vllm.engines import find_install, start_engines, write_tiny_model

    install, why = find_install()
    if install is None:
        raise SystemExit(f"no vLLM install: {why}")
    model = write_tiny_model(install)
    roles: dict[str, Any] = {"aggregated": "aggregated", "prefill": "prefill", "decode": "decode"}
    sims, procs = await _spawn_sims(roles)
    engines = await asyncio.to_thread(start_engines, install, model, log_dir, roles)
    try:
        result: Json = {}
        for label, urls in (("sim", sims), ("vllm", {k: e.url for k, e in engines.items()})):
            result[label] = {
                "engine": await survey_engine(urls["aggregated"]),
                "pd": await survey_pd(urls["prefill"], urls["decode"]),
            }
        result["vllm_startup_s"] = {k: e.startup_s for k, e in engines.items()}
        text = json.dumps(result, indent=1, sort_keys=True) + "\n"
        await asyncio.to_thread(out.write_text, text)
    finally:
        for engine in engines.values():
            engine.stop()
        for proc in procs:
            proc.kill()
            await proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--log-dir", type=Path, default=Path("vllm-logs"))
    args = parser.parse_args()
    asyncio.run(survey_both(args.out, args.log_dir))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
