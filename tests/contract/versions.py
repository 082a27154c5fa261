"""What differs between real vLLM 0.32 (CPU build, what runs here), vLLM 0.34 (what
Tandem pins; the project's reference sheet) and ``tandem engine sim``, and how each
difference was resolved. Pure data, printed by ``python -m tests.contract.versions`` and
kept in ``docs/vllm-differences.md`` (a test compares the two).

The contract tests read their version-specific expectations from here: an engine's
``version`` is ``0.32.0`` (real) or ``0.34.0`` (simulated: it follows the pinned version).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

V032, V034 = "0.32.0", "0.34.0"

_TOO_LONG = (
    "This model's maximum context length is 2048 tokens. However, your prompt contains {} "
    "input tokens, which exceeds this limit even without any output tokens. Please reduce "
    "the length of the input prompt."
)

#: (test case of test_errors.py, version) -> the exact message
MESSAGES: dict[tuple[str, str], str] = {
    ("prompt over max_model_len", V032): _TOO_LONG.format("at least 2049")
    + " (parameter=input_tokens, value=2049)",
    ("prompt over max_model_len", V034): _TOO_LONG.format(4400),
    ("unknown model", V032): "The model `nope` does not exist. Valid aliases: tiny-llama.",
    ("unknown model", V034): "The model `nope` does not exist.",
}

#: Prompt tokens a decode engine counts as ``external_kv_transfer`` out of n (per version)
EXTERNAL_PROMPT_TOKENS = {V032: "n", V034: "n-1"}
#: Whether the final chunk of a *streamed* prefill leg carries ``kv_transfer_params``
STREAMED_PREFILL_HAS_KV_PARAMS = {V032: False, V034: True}
#: Whether a client disconnect counts in ``vllm:request_success_total{finished_reason="abort"}``
CLIENT_ABORT_COUNTED = {V032: False, V034: True}
#: ``kv_transfer_params`` of a prefill answer present in one version only
PREFILL_PARAMS_ONLY_IN = {
    V032: {"remote_prefill_cached_tokens"},
    V034: {"remote_registration_generation"},
}
#: What a request that arrives during a SIGTERM drain gets (status, error type)
DURING_DRAIN = {V032: (500, "InternalServerError"), V034: (500, "InternalServerError")}
#: The error type of the 503 a full admission queue (``--max-num-queued-reqs``) answers
OVERLOADED_TYPE = {V032: "Service Unavailable", V034: "ServiceUnavailableError"}


@dataclass(frozen=True)
class Difference:
    subject: str
    real_032: str
    sheet_034: str
    sim_before: str
    resolution: str


FIXED, VERSION, KEPT = "sim fixed", "by version", "kept"

DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        "`stop`",
        "ends the output: finish `stop`, `stop_reason` the string, text cut "
        "before it (streams hold back `len-1` chars)",
        "=",
        "ignored (ran to `length`)",
        FIXED,
    ),
    Difference(
        "`logprobs` (completions)",
        "`tokens`, `token_logprobs`, `top_logprobs` (sampled "
        "first, then the k most likely: k or k+1 entries), `text_offset`",
        "=",
        "`null`",
        FIXED,
    ),
    Difference(
        "`logprobs`/`top_logprobs` (chat)",
        "`content[]` of `token`, `logprob`, `bytes`, exactly k `top_logprobs` (sampled first)",
        "=",
        "`null`",
        FIXED,
    ),
    Difference(
        "`echo`",
        "text and logprobs start with the prompt (first logprob `null`)",
        "=",
        "ignored",
        FIXED,
    ),
    Difference(
        "`response_format` json_object / json_schema",
        "JSON that follows the schema, "
        "finish `stop`; unknown type: pydantic 400; json_schema without schema: 400",
        "=",
        "ignored",
        FIXED,
    ),
    Difference(
        "`tools` + `tool_choice` auto/required/named",
        "400 (no `--tool-call-parser`); `none`: plain chat; `tool_choice` without `tools`: 400",
        "=",
        "ignored (200)",
        FIXED,
    ),
    Difference(
        "`top_logprobs` without `logprobs`, `temperature: -1`, `top_p: 0`, "
        "`logprobs: 21`, `max_tokens` > max_model_len",
        "400 BadRequestError with `(parameter=…, value=…)`",
        "=",
        "200 (accepted or clamped)",
        FIXED,
    ),
    Difference(
        "`n > 1`, lists of prompts",
        "served: one choice per (prompt, sample), usage summed; `n > 1` with `temperature: 0`: 400",
        "=",
        "400",
        FIXED,
    ),
    Difference(
        "output randomness",
        "`seed` fixes a (prompt, choice); none: fresh each time",
        "=",
        "a hash of the prompt (identical texts)",
        FIXED,
    ),
    Difference(
        'lax types (`max_tokens: "5"`, `stream: "true"`, `n: "2"`)',
        "accepted (pydantic lax mode)",
        "=",
        "400",
        FIXED,
    ),
    Difference(
        "error families",
        "own checks: `BadRequestError`, bare `param`, message suffix; "
        "pydantic: `Bad Request`, `param` `body.<field>`, printed error list",
        "=",
        "`Bad Request` and the bare field for both",
        FIXED,
    ),
    Difference(
        "empty `messages`",
        "400 `Cannot apply chat template to an empty conversation…`, `param` null",
        "",
        "400, another message",
        FIXED,
    ),
    Difference(
        "SIGTERM with `--shutdown-timeout`",
        "listener open, `/health` 200, running "
        "streams finish, new requests 500 `InternalServerError`, exit 0",
        'new requests "come back aborted"',
        "listener closed at once (connection refused)",
        FIXED,
    ),
    Difference(
        "`remote_request_id`",
        "vLLM's internal id `cmpl-<id>-0-<8 hex>`",
        "",
        "the bare `X-Request-Id`",
        FIXED,
    ),
    Difference("NIXL counters on an aggregated engine", "absent", "", "present", FIXED),
    Difference(
        "prompt over `max_model_len`",
        "`contains at least 2049 input tokens` + `(parameter=input_tokens, value=2049)`",
        "the exact count, no suffix",
        "= sheet",
        VERSION,
    ),
    Difference(
        "unknown model",
        "`… does not exist. Valid aliases: tiny-llama.`",
        "`… does not exist.`",
        "= sheet",
        VERSION,
    ),
    Difference(
        "prefill leg with `stream: true`",
        "no `kv_transfer_params` anywhere",
        "the final chunk carries them",
        "= sheet",
        VERSION,
    ),
    Difference(
        "prefill `kv_transfer_params` extras",
        "`remote_prefill_cached_tokens`",
        "`remote_registration_generation`",
        "= sheet",
        VERSION,
    ),
    Difference(
        "decode engine's prompt tokens by source",
        "all n `external_kv_transfer`",
        '"recomputes the last prompt token"',
        "n-1 external + 1 `local_compute`",
        VERSION,
    ),
    Difference(
        'client disconnect in `request_success{finished_reason="abort"}`',
        "not counted",
        "`abort` listed among the reasons",
        "counted",
        VERSION,
    ),
    Difference(
        "`/tokenize`, `/detokenize`",
        "served: `count`, `max_model_len`, `tokens`, `token_strs`; `prompt`",
        "not listed",
        "404",
        FIXED,
    ),
    Difference(
        "`/v1/responses` (Responses API)",
        "served: the response object, or `event:` + `data:` events ending with "
        "`response.completed` (no `[DONE]`); `kv_transfer_params` in request and response",
        "not listed",
        "404",
        FIXED,
    ),
    Difference(
        "unknown path, wrong method",
        '404 `{"detail":"Not Found"}`, 405 `{"detail":"Method Not Allowed"}` with `Allow`',
        "",
        "text/plain `404: Not Found`",
        FIXED,
    ),
    Difference(
        "`stream_options` without `stream`",
        'refused only when non-empty and the raw `stream` is falsy (`{}` and `stream: "false"` '
        "pass)",
        "",
        "refused whenever present without a true `stream`",
        FIXED,
    ),
    Difference(
        "`min_tokens` above `max_tokens` (or below 0)",
        "400 `min_tokens must be less than or equal to max_tokens=3, got 5.`, `param` null",
        "",
        "accepted",
        FIXED,
    ),
    Difference(
        "a body that is not a JSON object",
        "pydantic `model_attributes_type` at `body`",
        "",
        "`model_type`",
        FIXED,
    ),
    Difference(
        "extra fields (`token_ids`, `system_fingerprint`, `prompt_token_ids`…)",
        "present",
        "",
        "absent",
        KEPT,
    ),
    Difference(
        "text and token counts",
        "the tiny model's BPE and chat template",
        "",
        "4 bytes per token, its own template",
        KEPT,
    ),
    Difference(
        "`/tokenize` of a completion prompt",
        "adds bos (`add_special_tokens` defaults to true)",
        "",
        "no bos: the sim's usage counts none either",
        KEPT,
    ),
    Difference(
        "error `type` of the 503 of a full queue (`--max-num-queued-reqs`)",
        "`Service Unavailable` (the HTTP status phrase)",
        "`ServiceUnavailableError`",
        "=",
        VERSION,
    ),
    Difference(
        "NIXL histograms, `http_*`, `process_*` and other series nobody in Tandem reads",
        "present",
        "",
        "absent",
        KEPT,
    ),
)


def render_table() -> str:
    """The table as Markdown (what ``docs/vllm-differences.md`` holds)."""
    rows = ["| subject | real vLLM 0.32 CPU | sheet 0.34 | sim before | resolution |",
            "|---|---|---|---|---|"]  # fmt: skip
    for d in DIFFERENCES:
        cells = (d.subject, d.real_032, d.sheet_034 or "(not stated)", d.sim_before, d.resolution)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_table())
