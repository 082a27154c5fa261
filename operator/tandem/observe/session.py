"""An HTTP session a metrics source either borrows or opens (and then closes). Does I/O."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import aiohttp


class SessionOwner:
    """Base of the sources: ``_http()`` opens a session on first use unless one was given;
    ``aclose()`` (or leaving ``async with``) closes only a session it opened."""

    def __init__(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._owns_session = session is None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session if this source opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
