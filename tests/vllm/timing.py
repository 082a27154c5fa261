"""What the real-vLLM tests cost, wherever they live (``tests/vllm``, the ``vllm`` halves
of ``tests/contract``): engines alive now (their logs go into a failing test's report),
every start-up, and the time of each test. ``tests/conftest.py`` fills and prints it.
"""

from __future__ import annotations

from typing import Protocol


class Logged(Protocol):
    @property
    def name(self) -> str: ...

    def log_tail(self, lines: int = 60) -> str: ...


RUNNING: list[Logged] = []
STARTUPS: list[tuple[str, float]] = []
DURATIONS: dict[str, float] = {}
REPORTS: list[tuple[str, str]] = []
"""(title, text) printed after the run: what a real-vLLM tool measured (``vllm bench serve``)."""
