"""Loaded by the Python of the vLLM engines ``tandem up --engine vllm`` and the tests
start (this folder is first on their ``PYTHONPATH``; not imported by Tandem): NIXL's
progress thread sleeps between rounds instead of spinning.

NIXL 1.5 (the agent vLLM's ``NixlConnector`` creates) runs a progress thread with a
fixed delay of 0 µs between rounds, so every idle prefill or decode engine keeps a whole
core busy: a prefill/decode pair took both cores of a two-core machine doing nothing.
With ``TANDEM_NIXL_PROGRESS_DELAY_US`` set, the agent's config gets that delay (a
millisecond is a millisecond on a KV handoff, nothing next to a CPU engine's step).
Nothing else of vLLM or NIXL changes; without the variable this module does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

_DELAY = os.environ.get("TANDEM_NIXL_PROGRESS_DELAY_US", "")


class _PatchBindings(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``nixl*._bindings`` as usual, then wraps its ``nixlAgent``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if not (name.startswith("nixl") and name.endswith("._bindings")):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        agent = getattr(module, "nixlAgent", None)
        if agent is None:
            return
        delay = int(_DELAY)

        def nixl_agent(name: str, config: Any, *args: Any) -> Any:
            config.pthrDelay = delay
            return agent(name, config, *args)

        module.nixlAgent = nixl_agent  # type: ignore[attr-defined]


if _DELAY:
    sys.meta_path.insert(0, _PatchBindings())
