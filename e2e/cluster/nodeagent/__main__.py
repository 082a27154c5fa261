"""``python -m cluster.nodeagent --state-dir DIR``: run the node agent of a cluster run
(started by the supervisor; the nodes and the mode come from ``cluster.json``)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from cluster.layout import ClusterInfo
from cluster.nodeagent.agent import NodeAgent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.nodeagent", description=__doc__)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument(
        "--restart-backoff-s",
        type=float,
        default=10.0,
        help="first back-off before restarting a crashed container again (kubelet: 10)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(threadName)s %(message)s",
        stream=sys.stdout,
    )
    agent = NodeAgent(ClusterInfo.load(args.state_dir), restart_backoff_s=args.restart_backoff_s)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        agent.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
