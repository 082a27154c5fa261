"""Loopback pod IPs. Pure (in-memory bookkeeping).

Handed out in order from a random point of 127.0.1.1–127.0.255.254, so two runs on one
machine rarely meet and an address is not reused soon after its pod went away (a
restarted engine would otherwise meet the old one's sockets in TIME_WAIT).
"""

from __future__ import annotations

import random
import threading


class IpPool:
    """Loopback pod IPs 127.0.X.Y (X 1–255, Y 1–254), handed out round-robin."""

    SIZE = 255 * 254

    def __init__(self, seed: int | None = None) -> None:
        self.next = random.Random(seed).randrange(self.SIZE)
        self.in_use: set[str] = set()
        self.lock = threading.Lock()

    def take(self) -> str:
        with self.lock:
            for _ in range(self.SIZE):
                n = self.next
                self.next = (self.next + 1) % self.SIZE
                ip = f"127.0.{n // 254 + 1}.{n % 254 + 1}"
                if ip not in self.in_use:
                    self.in_use.add(ip)
                    return ip
        raise RuntimeError("no loopback pod IP left")

    def give_back(self, ip: str) -> None:
        with self.lock:
            self.in_use.discard(ip)
