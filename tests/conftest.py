"""Shared fixture: real sshd test hosts in network namespaces (root only)."""

from __future__ import annotations

import os
import sys

import pytest

from tests import testhosts

_EXIT: dict[str, int] = {}


def pytest_sessionfinish(session, exitstatus):
    _EXIT["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the `pytest` process here, with pytest's own exit status, once everything is reported.

    Interpreter finalization after the whole suite (torch, textual and test-server threads
    loaded in one process) aborted twice on this machine, in runs whose tests had all passed
    (`986 passed ...` then SIGABRT, exit 134). Nothing runs after this hook that the suite
    needs: reports are printed and temporary folders removed by then."""
    if "status" in _EXIT and "pytest" in sys.argv[0]:  # the pytest command, not pytest.main() in a caller
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT["status"])


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
