"""Shared fixture: real sshd test hosts in network namespaces (root only)."""

from __future__ import annotations

import pytest

from tests import testhosts


@pytest.fixture
def make_test_hosts():
    """Factory: `make_test_hosts(n, prefix=…, subnet=…)` → list of TestHost.

    Skips with the reason when hosts cannot be made here; every prefix used is torn
    down when the test ends, pass or fail.
    """
    reason = testhosts.skip_reason()
    if reason:
        pytest.skip(reason)
    prefixes: list[str] = []

    def make(n: int, prefix: str = "gtn", subnet: str = "10.201.0.0/24", **kwargs):
        prefixes.append(prefix)
        return testhosts.create_hosts(n, prefix, subnet, **kwargs)

    try:
        yield make
    finally:
        for prefix in prefixes:
            testhosts.teardown(prefix)
