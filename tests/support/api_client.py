"""A minimal JSON client for the emulated API (what a person with curl or kubectl does)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class Api:
    """A thin JSON client: every call returns (status, body)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as rsp:
            text = await rsp.text()
            return rsp.status, json.loads(text) if text else None

    async def create(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def get(self, path: str) -> tuple[int, Any]:
        return await self.call("GET", path)

    async def patch(self, path: str, body: Any, kind: str = "merge") -> tuple[int, Any]:
        ctype = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return await self.call("PATCH", path, body, {"Content-Type": ctype})

    async def put(self, path: str, body: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body)

    async def delete(self, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.call("DELETE", path, body)

    async def watch(self, path: str, *, events: int, timeout_s: float = 5.0) -> list[Any]:
        """Read ``events`` watch events (or until the server ends the stream)."""
        out: list[Any] = []
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self.session.get(self.base + path, timeout=timeout) as rsp:
            assert rsp.status == 200
            assert rsp.headers["Content-Type"].startswith("application/json")
            async for line in rsp.content:
                if line.strip():
                    out.append(json.loads(line))
                if len(out) >= events:
                    break
        return out
