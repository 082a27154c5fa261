"""The operator: watch InferenceServices, reconcile their children, report. Thin I/O.

:class:`Operator` (:mod:`tandem.control.app`) runs everything one replica does; the
:class:`Runtime` it creates while leading holds the caches, the work queue, the
:class:`Reconciler` and the per-service :class:`Tickers`. Decisions are pure and live in
:mod:`tandem.control.children` and :mod:`tandem.control.readiness`.
"""

from tandem.control.app import Operator
from tandem.control.config import OperatorConfig, default_identity
from tandem.control.metrics import OperatorMetrics
from tandem.control.readiness import compute_status, compute_status_patch
from tandem.control.reconcile import Reconciler
from tandem.control.runtime import Runtime
from tandem.controller.config import KopfTuning, LeaseConfig
from tandem.controller.leadership import LeaderElector
from tandem.controller.settings import build_settings
from tandem.controller.ticker import TickContext, Tickers

__all__ = [
    "KopfTuning",
    "LeaderElector",
    "LeaseConfig",
    "Operator",
    "OperatorConfig",
    "OperatorMetrics",
    "Reconciler",
    "Runtime",
    "TickContext",
    "Tickers",
    "build_settings",
    "compute_status",
    "compute_status_patch",
    "default_identity",
]
