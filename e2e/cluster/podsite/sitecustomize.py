"""Imported at start-up by every Python program a process-backed pod runs (its
directory is first on the pod's ``PYTHONPATH``). No I/O of its own.

In a pod, binding "all addresses" (``0.0.0.0`` or ``""``) means the pod's own network
namespace; here pods share the host's, so such a bind would take the port on every
loopback address and collide with every other pod. This rewrites those binds to the pod
IP (``TANDEM_E2E_POD_IP``), and refuses IPv6 wildcard binds with EADDRNOTAVAIL, which
asyncio's servers take as "no IPv6 here" and skip. Binds to a named address are left
alone.
"""

from __future__ import annotations

import errno
import os
import socket

_POD_IP = os.environ.get("TANDEM_E2E_POD_IP")

if _POD_IP:
    _bind = socket.socket.bind

    def _pod_bind(self: socket.socket, address: object) -> None:
        if isinstance(address, tuple) and address and address[0] in ("", "0.0.0.0", "::"):
            if self.family == socket.AF_INET:
                address = (_POD_IP, *address[1:])
            elif self.family == socket.AF_INET6:
                raise OSError(errno.EADDRNOTAVAIL, "pods have one IPv4 address here")
        _bind(self, address)  # type: ignore[arg-type]

    socket.socket.bind = _pod_bind  # type: ignore[assignment,method-assign]
