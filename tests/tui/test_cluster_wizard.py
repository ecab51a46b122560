"""Pilot tests of the cluster wizard: the real preflight on an sshd test host (root), and a
full run to the progress view and on to done against a stand-in (stand_in_builder.py)."""

import asyncio

from rich.text import Text
from textual.widgets import DataTable, SelectionList, Static

from core.state.node_records import add_nodes
from tests.tui import states
from tests.tui.stand_in_builder import StandInClusterBuilder
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.cluster_wizard import ClusterWizardScreen
from tui.modals.node_log import NodeLogScreen
from tui.widgets.log_view import LogView
from tui.widgets.net_matrix import NetMatrix
from tui.widgets.progress_table import ProgressTable


async def _open_wizard(pilot, nodes: int) -> SelectionList:
    await pilot.press("3")
    await on_screen(pilot, ClusterWizardScreen)
    picker = pilot.app.screen.query_one(SelectionList)
    await until(pilot, lambda: picker.option_count == nodes)
    return picker


def test_wizard_picks_nodes_runs_preflight_and_shows_progress_per_node_and_step(seeded):
    service, _ = seeded
    extra = states.recorded_nodes()[1]
    extra.name, extra.datacenter = "par-3", "paris"
    add_nodes(service.store, [extra])
    builder = StandInClusterBuilder(service.store, hold_at="k3s")
    app = make_app(service, cluster_builder=builder, **states.app_options())

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            picker = await _open_wizard(pilot, 3)
            assert picker.get_option_at_index(1).disabled  # fra-1 is BLOCKED (Docker)
            await pilot.press("enter")  # nothing selected: refused
            assert app.screen.stage == "pick"
            await pilot.press("space", "down", "space")  # down skips the blocked fra-1
            await pilot.press("enter")
            assert picker.selected == ["ams-2", "par-3"]
            await until(pilot, lambda: app.screen.stage == "options")
            await pilot.press("enter")
            await until(pilot, lambda: "preflight" in app.screen.outcomes)
            assert app.screen.request.name == "gpu-cluster" and app.screen.request.vpn
            await pilot.press("enter")
            await until(pilot, lambda: builder.holding.is_set(), 20)
            table = app.screen.query_one("#deploy-table", ProgressTable)
            await until(pilot, lambda: table.states.get(("ams-2", "k3s")) == "running")
            assert table.states[("par-3", "wireguard")] == "done"
            assert str(table.get_cell("ams-2", "k3s")).startswith("██░░")
            await pilot.press("l")
            await on_screen(pilot, NodeLogScreen)
            view = app.screen.query_one(LogView)
            await until(pilot, lambda: view.line_count >= 4)
            assert any("geotrain-containerd" in t for _, t, _event in view._lines)
            await pilot.press("escape")
            await on_screen(pilot, ClusterWizardScreen)
            builder.release.set()
            await until(pilot, lambda: app.screen.stage == "done", 20)
            matrix = app.screen.query_one(NetMatrix)
            assert matrix.row_count == 2
            assert isinstance(matrix.get_cell("par-3", "ams-2"), Text)
            await pilot.press("k")
            await until(pilot, lambda: any("merged context" in n.message
                                           for n in app._notifications))
    asyncio.run(run())


def test_wizard_preflight_runs_the_real_wizard_core_on_a_test_host(make_test_hosts, geotrain_home,
                                                                   monkeypatch):
    """The real core.bootstrap preflight over SSH against an sshd test host (root), judged
    for the steps the deploy will run: k3s, whose sha256 nothing pins, is refused in the
    app's words until the options step gives it."""
    from textual.widgets import Input
    from core.nodes.pool import ImportRequest, NodePool, Prompts

    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")
    (host,) = make_test_hosts(1, prefix="gtw", subnet="10.214.0.0/24")
    NodePool(prompts=Prompts(trusted={host.fingerprint})).import_nodes([ImportRequest(
        name="w1", host=host.ip, port=host.port, username=host.user, key_path=host.key_path)])
    app = make_app(poll_seconds=0)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_wizard(pilot, 1)
            await pilot.press("space", "enter", "enter")
            await until(pilot, lambda: "preflight" in app.screen.outcomes, 120)
            table = app.screen.query_one("#preflight-table", ProgressTable)
            state = table.states[("w1", "preflight")]
            outcome = app.screen.outcomes["preflight"]
            assert state == ("done" if outcome.ok else "failed")
            assert outcome.lines and outcome.lines[0].startswith("w1:")
            assert not outcome.ok and "fill 'sha256 of k3s'" in outcome.lines[0]
            await pilot.press("l")
            await on_screen(pilot, NodeLogScreen)
            view = app.screen.query_one(LogView)
            await until(pilot, lambda: view.line_count > 0)
            await pilot.press("escape", "escape")  # the log, then back to the options
            await until(pilot, lambda: app.screen.stage == "options")
            app.screen.query_one("#sha256-k3s", Input).value = "ab" * 32
            await pilot.press("enter")
            await until(pilot, lambda: "preflight" in app.screen.outcomes, 120)
            assert "sha256" not in " ".join(app.screen.outcomes["preflight"].lines)
    asyncio.run(run())


def test_a_failed_k3s_download_names_the_bundle_and_no_kubeconfig_is_offered(seeded, tmp_path):
    """The wizard's end after k3s never came up: the failure says what curl's exit 6 means
    and names the air-gap bundle; `k` (import kubeconfig) is neither shown nor run."""
    from textual.widgets import Checkbox, Input, Static

    from core.bootstrap.failures import explain_download
    from tui.screens.cluster_wizard import NO_K3S_HINT

    service, _ = seeded
    failure = explain_download("downloading k3s (amd64)", 6, "amd64")
    builder = StandInClusterBuilder(service.store, fail_at="k3s", failure=failure)
    app = make_app(service, cluster_builder=builder, **states.app_options())
    bundle = tmp_path / "bundle"
    bundle.mkdir()

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_wizard(pilot, 2)
            await pilot.press("space", "enter")
            await until(pilot, lambda: app.screen.stage == "options")
            app.screen.query_one("#k3s-bundle", Input).value = str(bundle)  # no k3s binary in it
            await pilot.press("enter")
            error = app.screen.query_one("#wizard-error", Static)
            assert app.screen.stage == "options" and "has no k3s binary" in str(error.render())
            (bundle / "k3s").write_bytes(b"\x7fELF")
            app.screen.query_one("#prepull", Checkbox).value = True
            await pilot.press("enter")
            await until(pilot, lambda: "preflight" in app.screen.outcomes)
            await pilot.press("enter")
            await until(pilot, lambda: app.screen.stage == "done", 20)
            (request,) = builder.requests
            assert request.k3s_bundle == str(bundle) and request.prepull
            assert "images" in app.screen.query_one("#deploy-table", ProgressTable).steps
            summary = str(app.screen.query_one("#build-summary", Static).render())
            assert "exit code 6: the node cannot resolve the download host" in summary
            assert "--k3s-bundle DIR" in summary
            assert str(app.screen.query_one("#done-hint", Static).render()).startswith(NO_K3S_HINT[:40])
            assert app.screen.check_action("import_kubeconfig", ()) is False
            await pilot.press("k")
            await pilot.pause()
            assert not any("merged context" in n.message for n in app._notifications)
    asyncio.run(run())


def test_c_at_done_checks_the_new_cluster_in_the_clusters_view(seeded):
    """The wizard's done screen offers the same check as the Clusters view's `k` (issue 43). The check is
    core.cluster_checks' SSH way; the stand-in builder records the cluster without its members, so its
    one-line answer is what the test sees (tests/bootstrap run the SSH check on real sshd hosts)."""
    from tui.screens.clusters import ClustersScreen

    service, _ = seeded
    builder = StandInClusterBuilder(service.store)
    app = make_app(service, cluster_builder=builder, **states.app_options())

    async def run():
        async with app.run_test(size=(140, 40)) as pilot:
            await _open_wizard(pilot, 2)
            await pilot.press("space", "enter")
            await until(pilot, lambda: app.screen.stage == "options")
            await pilot.press("enter")
            await until(pilot, lambda: "preflight" in app.screen.outcomes)
            await pilot.press("enter")
            await until(pilot, lambda: app.screen.stage == "done", 20)
            assert "c check the cluster" in str(app.screen.query_one("#done-hint", Static).render())
            await pilot.press("c")
            await on_screen(pilot, ClustersScreen)
            await until(pilot, lambda: any("Not checked" in n.message for n in app._notifications), 20)
            table = app.screen.query_one("#clusters", DataTable)
            assert table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == "gpu-cluster"
            said = next(n.message for n in app._notifications if "Not checked" in n.message)
            assert "no nodes given" in said  # core.cluster_checks' SSH way: the stand-in builder records no members
    asyncio.run(run())
