"""The control-plane harness's fixtures for its own tests."""

from cluster.fixtures import cluster, namespace

__all__ = ["cluster", "namespace"]
