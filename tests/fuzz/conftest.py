"""The operator fixtures (an emulator per test, operators on demand) for the fuzz suite."""

from tests.operator.conftest import api, k, operators

__all__ = ["api", "k", "operators"]
