"""Default container images. Pure.

The vLLM image is pinned to the release whose interfaces Tandem speaks (flags, metric
names, the P/D handoff); Tandem's own image runs the router and the simulated engine.
"""

from __future__ import annotations

from tandem import __version__
from tandem.api.validate import VLLM_VERSION

VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
TANDEM_IMAGE = f"ghcr.io/tandem-serving/tandem:{__version__}"
