"""The simulated vLLM engine server (aiohttp + prometheus_client). I/O.

``create_app(SimServerConfig(...))`` serves vLLM 0.34's OpenAI-compatible API, ``/health``,
``/metrics`` and the P/D handoff, stepping one ``tandem.engine.model.Engine`` in real time.
``build_server_config`` turns preset names and flags into a config.
"""

from tandem.engine.server.app import create_app
from tandem.engine.server.config import FaultConfig, Role, SimServerConfig
from tandem.engine.server.factory import build_server_config

__all__ = ["FaultConfig", "Role", "SimServerConfig", "build_server_config", "create_app"]
