"""KubeClient against the emulator: credentials from a kubeconfig, and the faults the real
API server cannot be made to give on demand (5xx, a slow server, no server). Errors,
observers and field managers are checked on the real API server (``e2e/test_kube.py``)."""

from __future__ import annotations

import socket

import pytest

from tandem.kube import KubeClient, KubeError
from tests.support import Emulator, FaultRule, emulator_url, kubeconfig_for


async def test_a_kubeconfig_gives_the_server_and_token(k: Emulator) -> None:
    with kubeconfig_for(emulator_url(k)) as path:
        client = await KubeClient.from_environment(kubeconfig=path, user_agent="ua/1")
    try:
        info = client.connection()
        assert info.server == emulator_url(k) and info.token == "emulator"
        await client.request("GET", "/api/v1/namespaces/default/configmaps")
        assert k.log[-1].user_agent == "ua/1"
    finally:
        await client.close()


async def test_server_errors_are_transient(k: Emulator, client: KubeClient) -> None:
    k.faults.add(FaultRule(status=503, methods={"GET"}))
    with pytest.raises(KubeError) as err:
        await client.request("GET", "/api/v1/namespaces/default/configmaps")
    assert err.value.status == 503 and err.value.transient


async def test_a_slow_server_is_a_transient_timeout(k: Emulator) -> None:
    k.faults.add(FaultRule(status=504, methods={"GET"}, delay_s=1.0))
    client = KubeClient.for_url(emulator_url(k), timeout_s=0.2)
    try:
        with pytest.raises(KubeError) as err:
            await client.request("GET", "/api/v1/namespaces/default/configmaps")
        assert (err.value.status, err.value.reason) == (0, "Timeout") and err.value.transient
    finally:
        await client.close()


async def test_no_server_is_a_transient_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = KubeClient.for_url(f"http://127.0.0.1:{port}", timeout_s=1.0)
    try:
        with pytest.raises(KubeError) as err:
            await client.request("GET", "/api")
        assert err.value.status == 0 and err.value.transient
    finally:
        await client.close()


async def test_a_token_is_sent_as_a_bearer_header(k: Emulator) -> None:
    client = KubeClient.for_url(emulator_url(k), token="s3cret")
    try:
        await client.request("GET", "/api/v1/namespaces/default/configmaps")
        assert k._requests[-1].headers.get("Authorization") == "Bearer s3cret"
        assert client.connection().token == "s3cret"
    finally:
        await client.close()
