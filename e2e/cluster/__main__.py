"""``python -m cluster``: see ``cluster.cli``."""

import sys

from cluster.cli import main

sys.exit(main())
