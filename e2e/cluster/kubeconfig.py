"""Kubeconfig files for the harness's identities. Writes files; ``write_sa_kubeconfig``
also calls the API (TokenRequest).

Credentials are embedded (``*-data``), so a kubeconfig works when copied elsewhere.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from cluster.pki import CertPair


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _document(server: str, ca: Path, name: str, user: dict[str, Any], namespace: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tandem-e2e",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "tandem-e2e", "user": name, "namespace": namespace},
            }
        ],
        "current-context": name,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_cert_kubeconfig(
    path: Path, *, server: str, ca: Path, client: CertPair, name: str, namespace: str = "default"
) -> Path:
    """A kubeconfig that authenticates with a client certificate."""
    user = {"client-certificate-data": _b64(client.cert), "client-key-data": _b64(client.key)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_document(server, ca, name, user, namespace))
    path.chmod(0o600)
    return path


def write_token_kubeconfig(
    path: Path, *, server: str, ca: Path, token: str, name: str, namespace: str
) -> Path:
    """A kubeconfig that authenticates with a bearer token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_document(server, ca, name, {"token": token}, namespace))
    path.chmod(0o600)
    return path


def request_token(
    admin_kubeconfig: Path, namespace: str, service_account: str, expiration_s: int = 3600
) -> str:
    """A token for the ServiceAccount through the TokenRequest API, as the admin."""
    from kubernetes import client

    from cluster.kubeapi import api_client as make_client

    api_client = make_client(admin_kubeconfig)
    try:
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_s)
        )
        answer = client.CoreV1Api(api_client).create_namespaced_service_account_token(
            service_account, namespace, body, _request_timeout=30
        )
        if answer.status is None:
            raise RuntimeError(f"TokenRequest for {namespace}/{service_account} gave no token")
        return str(answer.status.token)
    finally:
        api_client.close()


def write_sa_kubeconfig(
    directory: Path,
    *,
    admin_kubeconfig: Path,
    server: str,
    ca: Path,
    namespace: str,
    service_account: str,
    expiration_s: int = 3600,
) -> Path:
    """``directory/sa-<namespace>-<name>.yaml``: a kubeconfig acting as the ServiceAccount.

    The ServiceAccount must exist. The identity the apiserver sees is
    ``system:serviceaccount:<namespace>:<name>``, exactly as for a pod using it.
    """
    token = request_token(admin_kubeconfig, namespace, service_account, expiration_s)
    return write_token_kubeconfig(
        directory / f"sa-{namespace}-{service_account}.yaml",
        server=server,
        ca=ca,
        token=token,
        name=f"{namespace}-{service_account}",
        namespace=namespace,
    )
