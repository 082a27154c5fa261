"""Tandem: a Kubernetes operator and autoscaler for disaggregated LLM inference fleets.

The import package is ``tandem`` (never ``operator``, which is the standard library's).
Pure layers (``api``, ``build``, ``policy``, the engine model, parsers) do no I/O;
the shells around them (``kube``, ``control``, servers, ``cli``) are thin.
"""

__version__ = "0.1.0"
