"""Test support: the Kubernetes emulator realism layer, fault injection, fixtures."""

from tests.support.fixtures import emulator_url, kubeconfig_for, serve_emulator
from tests.support.kube_emulator import Emulator, Entry, register_resources
from tests.support.kube_faults import Fault, FaultInjector, FaultRule
from tests.support.kube_verbs import ScalePaths
from tests.support.waiting import eventually, stays

__all__ = [
    "Emulator",
    "Entry",
    "Fault",
    "FaultInjector",
    "FaultRule",
    "ScalePaths",
    "emulator_url",
    "eventually",
    "kubeconfig_for",
    "register_resources",
    "serve_emulator",
    "stays",
]
