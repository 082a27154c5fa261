"""The engines' ``preStop`` drain: wait for running sequences before SIGTERM. Pure.

When a pool shrinks (or a pod is replaced) the pod is marked for deletion, its
``preStop`` hook runs, and only then does the container get SIGTERM. The hook built
here runs ``python3 -c DRAIN_SCRIPT`` — python3 is in every engine image (vLLM's and
Tandem's), curl is not — and does two things:

1. waits ``settle_s`` seconds, so Services' endpoints and the router (which drops a pod
   the moment it carries a ``deletionTimestamp``) stop sending new requests;
2. reads the engine's own ``/metrics`` every half second until
   ``vllm:num_requests_running`` plus ``vllm:num_requests_waiting`` is 0 (either
   spelling, ``vllm:`` or ``vllm_``; summed over every series), so the streams it
   accepted finish instead of being cut; at most ``bound_s`` seconds (the engine's
   ``--shutdown-timeout``). An engine that refuses connections has nothing to drain.

Then SIGTERM starts vLLM's own drain of whatever is left, for up to
``--shutdown-timeout`` more, so the pod's ``terminationGracePeriodSeconds`` must cover
``settle_s + 2 × shutdown timeout`` (:func:`compute_grace_period_s`). The hook always
exits 0: a failed hook only delays the SIGTERM it precedes.
"""

from __future__ import annotations

import math

#: Seconds the pod keeps serving after it is marked for deletion, before draining, so
#: endpoints and the router stop routing to it.
SETTLE_S = 5.0
#: Seconds of slack in the grace period beyond preStop and vLLM's drain.
GRACE_SLACK_S = 15

DRAIN_SCRIPT = """\
import sys, time, urllib.error, urllib.request
NAMES = ("num_requests_running", "num_requests_waiting")
def in_flight(text):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(("vllm:", "vllm_")):
            continue
        if line[5:].split("{", 1)[0].split(" ", 1)[0] in NAMES:
            rest = line[line.rindex("}") + 1:] if "}" in line else line.split(None, 1)[1]
            total += float(rest.split()[0])
    return total
def drain(url, settle, bound):
    time.sleep(settle)
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url, headers={"Accept": "text/plain"})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if in_flight(resp.read().decode("utf-8", "replace")) <= 0:
                    return
        except urllib.error.URLError as err:
            if isinstance(err.reason, ConnectionRefusedError):
                return
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.5)
if __name__ == "__main__":
    drain(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
"""
"""Standard library only; argv: metrics URL, settle seconds, bound seconds. Importable
(``__name__`` other than ``__main__``) to test ``in_flight`` on its own."""


def build_drain_command(port: int, settle_s: float, bound_s: float) -> list[str]:
    """The ``preStop`` exec command for an engine serving on ``port`` in its pod.

    >>> build_drain_command(8000, 5, 30)[3:]
    ['http://127.0.0.1:8000/metrics', '5', '30']
    """
    url = f"http://127.0.0.1:{port}/metrics"
    return ["python3", "-c", DRAIN_SCRIPT, url, f"{settle_s:g}", f"{bound_s:g}"]


def compute_grace_period_s(settle_s: float, shutdown_timeout_s: float) -> int:
    """``terminationGracePeriodSeconds``: the preStop drain (settle plus at most the
    shutdown timeout), then vLLM's own drain on SIGTERM (the shutdown timeout), plus
    slack.

    >>> compute_grace_period_s(5, 30)
    80
    """
    return math.ceil(settle_s + 2 * shutdown_timeout_s) + GRACE_SLACK_S
