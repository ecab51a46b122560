"""`k` in the Clusters view on a cluster geotrain built over SSH (issue 43): two real sshd test hosts
with a real wireguard-go mesh (root; tests/testhosts.py), the check run by core.cluster_checks through
the app's worker, its per-node and per-link rows shown. The hosts share this machine's files, so the
ranks run in the Python that has torch here (the check's `python` option, as the CLI's --python)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from core.bootstrap.deploy import build_plan, deploy
from core.state.store import Store
from core.workspaces import WorkspaceService
from tests import testhosts
from tests.bootstrap.cluster_hosts import ShellFactory, add_host_nodes
from tests.tui import states
from tests.tui.test_clusters import cells, open_cluster, shown
from tests.tui.waiting import until
from tui.app import make_app

PREFIX, SUBNET, MESH = "gtcu", "10.243.0.0/24", "10.244.0.0/24"


@pytest.fixture
def built(geotrain_home):
    if reason := testhosts.skip_reason():
        pytest.skip(reason)
    hosts = testhosts.create_hosts(2, PREFIX, SUBNET)
    try:
        store = Store()
        names = add_host_nodes(store, hosts)
        done = deploy(build_plan(store, "duo", names, subnet=MESH), only=["preflight", "wireguard", "netmatrix"],
                      shell_factory=ShellFactory(hosts), store=store)
        assert done.summary.ok, done.summary.lines()
        yield hosts, names
    finally:
        testhosts.teardown(PREFIX)


def test_k_checks_an_ssh_cluster_and_shows_its_nodes_and_link(built):
    hosts, names = built
    options = {"seconds": 0.3, "size": "tiny", "python": os.path.realpath(sys.executable),
               "shell_factory": ShellFactory(hosts)}
    app = make_app(WorkspaceService(), check_options=options, **states.app_options())

    async def run():
        async with app.run_test(size=(200, 40)) as pilot:
            await open_cluster(pilot, "duo")
            await pilot.press("k")
            await until(pilot, lambda: " ago): " in shown(app, "#check-summary"), timeout=300)
            devices, links = cells(app, "#check-devices"), cells(app, "#check-links")
            print(devices, links, shown(app, "#check-summary"))
            assert [row[0] for row in devices] == names and all(float(row[3]) > 0 for row in devices)
            (link,) = links
            assert names[0] in link[0] and names[1] in link[0] and float(link[3]) > 0
            assert link[4] != "-" and link[6] == "OK"  # the mesh's ping beside the all-reduce
            assert "all good" in shown(app, "#check-summary")
    asyncio.run(run())
