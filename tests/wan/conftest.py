"""WAN tests use the core tests' private state directory per test."""

from tests.core.conftest import geotrain_home  # noqa: F401  (autouse fixture)
