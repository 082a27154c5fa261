"""The end-to-end suite runs on the real control plane of ``e2e/cluster``: the ``cluster``
fixture (session) starts one for the session, or reuses the one ``bash e2e/kube up``
started (``TANDEM_E2E_CLUSTER``, or a ``KUBECONFIG`` of that run). Nothing here is
skipped: without the control-plane programs every test fails with the command that
builds them (``bash e2e/cluster/build.sh``).
"""

from cluster.fixtures import cluster, namespace

__all__ = ["cluster", "namespace"]
