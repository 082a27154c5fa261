"""The trace family: named :class:`~tandem.traces.generate.TraceShape` members that
stress what the Azure traces do not. Pure data.

Six members span the axes between them (long-context share 0 to 30 %, diurnal swings,
bursts, a shifting prompt/output mix, multi-turn prefix reuse); ``bench/autoscale.py``
replays each next to the Azure traces, and ``tandem trace generate --kind NAME`` writes
one. Rates are about one request per second at scale 1 (the bench scales each to the same
rule: its oracle then needs at least 8 GPUs at peak); none of these numbers was fitted
to a policy.

======================  ======  ======================================================
member                  long    what it stresses
======================  ======  ======================================================
``chat-diurnal``        0 %     a day's swing (x0.4 to x1.6), multi-turn chat
``long5-bursty``        5 %     bursts: 8 an hour, 10 s each at 8x
``long15-multiturn``    15 %    long documents then follow-up turns reusing them
``long30``              30 %    a third of the work beyond one GPU's 1 s prefill
``mix-shift``           0-20 %  decode-bound at the start, prefill-bound at the end
``agent-sessions``      10 %    many fast turns: contexts grow to tens of thousands
======================  ======  ======================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.traces.generate import TraceShape

FAMILY: Mapping[str, TraceShape] = {
    s.name: s
    for s in (
        TraceShape(
            name="chat-diurnal",
            description="chat with a day's swing folded into the trace (x0.4 to x1.6) "
            "and multi-turn conversations; no long-context requests",
            rate_per_s=1.5,
            mix_start={"chat": 0.85, "code": 0.15},
            diurnal_amplitude=0.6,
            turns_mean=3.0,
            think_s=30.0,
            tags=("diurnal", "multi-turn"),
        ),
        TraceShape(
            name="long5-bursty",
            description="5 % long-context requests and bursts (8 an hour, 10 s each, "
            "conversations arriving 8x faster)",
            rate_per_s=1.0,
            mix_start={"chat": 0.75, "code": 0.2, "long": 0.05},
            diurnal_amplitude=0.3,
            bursts_per_hour=8.0,
            burst_s=10.0,
            burst_multiplier=8.0,
            tags=("long 5 %", "bursts"),
        ),
        TraceShape(
            name="long15-multiturn",
            description="15 % long-context conversations whose follow-up turns reuse "
            "the document (prefix reuse), a mild swing, two bursts an hour",
            rate_per_s=0.75,
            mix_start={"chat": 0.65, "code": 0.1, "generate": 0.1, "long": 0.15},
            diurnal_amplitude=0.4,
            bursts_per_hour=2.0,
            burst_s=15.0,
            burst_multiplier=5.0,
            turns_mean=2.5,
            think_s=45.0,
            tags=("long 15 %", "multi-turn", "bursts"),
        ),
        TraceShape(
            name="long30",
            description="30 % long-context requests, as long-context services see: most "
            "of the prompt tokens are beyond what one GPU prefills within 1 s",
            rate_per_s=0.5,
            mix_start={"chat": 0.6, "code": 0.1, "long": 0.3},
            diurnal_amplitude=0.3,
            tags=("long 30 %", "diurnal"),
        ),
        TraceShape(
            name="mix-shift",
            description="the prompt/output mix shifts over the trace: short prompts with "
            "long answers (decode-bound) at the start, long prompts with short answers "
            "(prefill-bound, 20 % long-context) at the end",
            rate_per_s=1.0,
            mix_start={"generate": 0.6, "chat": 0.4},
            mix_end={"code": 0.5, "chat": 0.3, "long": 0.2},
            diurnal_amplitude=0.2,
            tags=("mix shift", "long 0-20 %"),
        ),
        TraceShape(
            name="agent-sessions",
            description="agent-like sessions: many quick turns (mean 8, 5 s think time) "
            "whose contexts grow to tens of thousands of tokens, 10 % starting from a "
            "long document",
            rate_per_s=1.0,
            mix_start={"chat": 0.6, "code": 0.3, "long": 0.1},
            diurnal_amplitude=0.3,
            bursts_per_hour=2.0,
            turns_mean=8.0,
            think_s=5.0,
            tags=("multi-turn", "long 10 %", "growing context"),
        ),
    )
}


def family_member(name: str) -> TraceShape:
    """The member called ``name``; ``ValueError`` listing the members otherwise."""
    try:
        return FAMILY[name]
    except KeyError:
        raise ValueError(f"unknown trace kind {name!r}; kinds: {', '.join(FAMILY)}") from None
