"""The Clusters view (issue 43): `k` runs `clusters check` on local for real (two gloo ranks on this
machine, tiny burn-in) and shows the kept result; `c`/`u` cordon and uncordon the highlighted node of a
Kubernetes cluster registered to the stand-in API server (tests/kubernetes/fake_api_server.py), which
records the PATCH; on local the key says in one line why it does not apply."""

import asyncio
import copy

from textual.widgets import DataTable, Static

from core.cli import main
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import fake, kubeconfig  # noqa: F401 (fixtures)
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from core.cluster_checks import last_check
from tui.screens.clusters import ClustersScreen

TINY = {"seconds": 0.2, "size": "125m"}


def cells(app, table_id: str) -> list[list[str]]:
    table = app.screen.query_one(table_id, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def shown(app, widget_id: str) -> str:
    return " ".join(str(app.screen.query_one(widget_id, Static).render()).split())


def notes(app) -> list[str]:
    return [n.message for n in app._notifications]


async def open_cluster(pilot, name: str) -> None:
    """The Clusters view (key 4) with `name` highlighted, once the list has it."""
    app = pilot.app
    await pilot.press("4")
    await on_screen(pilot, ClustersScreen)
    table = app.screen.query_one("#clusters", DataTable)
    await until(pilot, lambda: name in [k.value for k in table.rows])
    table.move_cursor(row=table.get_row_index(name))
    await until(pilot, lambda: shown(app, "#check-summary").startswith(name))


def test_k_checks_local_and_the_result_is_shown_and_kept(geotrain_home):
    service = WorkspaceService()
    app = make_app(service, check_options=TINY, **states.app_options())

    async def run():
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot.press("4")
            await on_screen(pilot, ClustersScreen)
            await until(pilot, lambda: cells(app, "#clusters"))
            assert cells(app, "#clusters")[0][0] == "local" and cells(app, "#clusters")[0][4] == "never"
            assert "not checked yet" in shown(app, "#check-summary")
            await pilot.press("k")
            await until(pilot, lambda: app.screen.query_one("#check-progress").display)
            assert shown(app, "#check-progress").startswith("Checking local: burning in each device")
            await until(pilot, lambda: " ago): " in shown(app, "#check-summary"), timeout=240)
            assert not app.screen.query_one("#check-progress").display
            devices = cells(app, "#check-devices")
            assert [row[0] for row in devices] == ["local", "local"] and [row[1] for row in devices] == ["0", "1"]
            assert all(float(row[3]) > 0 and row[7] == "OK" for row in devices)  # a real matmul rate, per rank
            links = cells(app, "#check-links")
            assert len(links) == 1 and links[0][0].startswith("local: 2 ranks") and float(links[0][3]) > 0
            assert "all good" in cells(app, "#clusters")[0][4] and "all good" in shown(app, "#check-summary")
            assert "local: all good" in notes(app)
            await pilot.press("c")  # local has no scheduler: one line, nothing else
            await until(pilot, lambda: any("Cordon does not apply" in n for n in notes(app)))
            line = next(n for n in notes(app) if "Cordon does not apply" in n)
            assert "no scheduler" in line and "\n" not in line
    asyncio.run(run())
    kept = last_check(service.store, "local")  # what `geotrain clusters check --last` shows
    assert kept["ok"] and len(kept["nodes"][0]["devices"]) == 2


def test_c_and_u_cordon_the_highlighted_node_through_the_api(fake, kubeconfig, geotrain_home):  # noqa: F811
    fake.nodes = copy.deepcopy(fake.nodes)
    assert main(["clusters", "add-kubernetes", "away", "--kubeconfig", kubeconfig]) == 0
    app = make_app(WorkspaceService(), **states.app_options())

    async def run():
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot.press("4")
            await on_screen(pilot, ClustersScreen)
            await until(pilot, lambda: len(cells(app, "#clusters")) == 2)
            table = app.screen.query_one("#clusters", DataTable)
            table.move_cursor(row=table.get_row_index("away"))
            await until(pilot, lambda: "away" in shown(app, "#check-summary"))
            rows = cells(app, "#check-devices")
            assert [r[0] for r in rows] == ["gpu-a", "gpu-b", "cpu-a"] and rows[0][7] == "not checked"
            await pilot.press("c")
            await until(pilot, lambda: fake.patches)
            assert fake.patches == [("gpu-a", "application/strategic-merge-patch+json",
                                     {"spec": {"unschedulable": True}})]
            await until(pilot, lambda: "cordoned" in cells(app, "#check-devices")[0][7])
            assert any("gpu-a on away is now cordoned" in n for n in notes(app))
            app.screen.query_one("#check-devices", DataTable).focus()
            await pilot.press("down")  # gpu-b: not touched by the uncordon below
            await pilot.press("up", "u")
            await until(pilot, lambda: len(fake.patches) == 2)
            assert fake.patches[1] == ("gpu-a", "application/strategic-merge-patch+json",
                                       {"spec": {"unschedulable": None}})
            await until(pilot, lambda: "cordoned" not in cells(app, "#check-devices")[0][7])
    asyncio.run(run())


def test_the_nodes_view_shows_a_nodes_last_check(app, seeded):
    """A kept result naming pool node fra-1 as failing (as the check of a wizard-built cluster writes it,
    verdict from core.domain.check_results.judge) appears in the Nodes view's detail with why."""
    import json

    from core.domain.check_results import judge
    from core.cluster_checks import SETTING
    from tui.screens.nodes import NodesScreen

    rank = {"rank": 0, "device": "NVIDIA A100-SXM4-80GB", "matmul_flops": 2.9e14, "memory_tested": 1 << 30,
            "memory_errors": 12, "reduce_bytes": 1 << 24, "reduce_seconds": 0.01, "busbw": 3e9, "world": 1,
            "backend": "nccl"}
    result = judge("eu-west", "fra-1", [rank], [], [], 1, at=states.NOW - 60)
    seeded[0].store.set_setting(SETTING.format("eu-west"), json.dumps(result))

    async def run():
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("2")
            await on_screen(pilot, NodesScreen)
            await until(pilot, lambda: app.screen.query_one(DataTable).row_count == 2)
            app.screen.query_one(DataTable).move_cursor(row=app.screen.query_one(DataTable).get_row_index("fra-1"))
            await until(pilot, lambda: "last check" in shown(app, "#details"))
            details = shown(app, "#details")
            assert "last check on eu-west: FAILING" in details
            assert "rank 0's memory test read back 12 wrong bytes" in details
    asyncio.run(run())


def test_a_kept_result_holding_markup_is_shown_literally(geotrain_home):
    """Node names, devices and reasons come from ranks and tools (a peer could write them): shown as written."""
    import json

    from core.domain.check_results import judge
    from core.cluster_checks import SETTING

    service = WorkspaceService()
    hostile = "[@click=app.quit]x[/]"
    rank = {"rank": 0, "device": f"[bold red]{hostile}", "matmul_flops": 1e12, "memory_tested": 1 << 20,
            "memory_errors": 3, "reduce_bytes": 1 << 20, "reduce_seconds": 0.01, "busbw": 1e9, "world": 1,
            "backend": "[/]"}
    result = judge("local", f"n[/]{hostile}", [rank], [], [], 1, at=states.NOW)
    service.store.set_setting(SETTING.format("local"), json.dumps(result))
    app = make_app(service, **states.app_options())

    async def run():
        async with app.run_test(size=(180, 40)) as pilot:
            await pilot.press("4")
            await on_screen(pilot, ClustersScreen)
            await until(pilot, lambda: cells(app, "#check-devices"))
            row = cells(app, "#check-devices")[0]
            assert row[0] == f"n[/]{hostile}" and row[2] == f"[bold red]{hostile}"
            assert "read back 3 wrong bytes" in shown(app, "#check-summary") and app.is_running
    asyncio.run(run())


def test_c_in_the_nodes_view_cordons_a_pool_node_of_a_wizard_built_cluster(fake, kubeconfig, seeded):  # noqa: F811
    """fra-1 of the pool is a k3s node of a wizard-built cluster whose kubeconfig reaches the stand-in API
    server (as core/bootstrap/deploy.py records it): c there patches fra-1's Node; ams-2, in no such
    cluster, is one line."""
    from core.domain.records import Cluster
    from core.state.cluster_records import save_cluster
    from tui.screens.nodes import NodesScreen

    service, _ = seeded
    fake.nodes = [*copy.deepcopy(fake.nodes), {"metadata": {"name": "fra-1"}, "status": {"allocatable": {}}}]
    save_cluster(service.store, Cluster(name="k3s-east", kind="geotrain", kubeconfig_path=kubeconfig), create=True)
    with service.store.write() as conn:
        conn.execute("INSERT INTO cluster_nodes(cluster, node, role, mesh_ip, state) VALUES (?,?,?,?,?)",
                     ("k3s-east", "fra-1", "server", "10.90.0.1", "{}"))
    app = make_app(service, **states.app_options())

    async def run():
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("2")
            await on_screen(pilot, NodesScreen)
            table = app.screen.query_one(DataTable)
            await until(pilot, lambda: table.row_count == 2)
            table.move_cursor(row=table.get_row_index("fra-1"))
            await pilot.press("c")
            await until(pilot, lambda: fake.patches)
            assert fake.patches == [("fra-1", "application/strategic-merge-patch+json", {"spec": {"unschedulable": True}})]
            await until(pilot, lambda: "fra-1 on k3s-east is now cordoned: no new pods are scheduled on it." in notes(app))
            table.move_cursor(row=table.get_row_index("ams-2"))
            await pilot.press("u")
            await until(pilot, lambda: any("no cluster built here lists node 'ams-2'" in n for n in notes(app)))
            assert len(fake.patches) == 1
    asyncio.run(run())
