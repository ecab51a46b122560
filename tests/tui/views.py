"""Every screen of the app in a fixed state: used by the snapshot tests and by
`python -m tests.tui.make_screenshots`, so the README's pictures are what is tested."""

from __future__ import annotations

from textual.widgets import Input, Select, TextArea

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.config_editor import ConfigEditorScreen
from tui.modals.help import HelpScreen
from tui.screens.node_import import NodeImportScreen
from tui.screens.nodes import NodesScreen
from tui.screens.workspace_deploy import DeployScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.screens.workspaces import WorkspacesScreen
from tui.modals.confirm import ConfirmScreen
from tui.modals.error import ErrorScreen
from tui.widgets.log_view import LogView
from tui.widgets.requirements_table import RequirementsTable


def _rows(app) -> int:
    """Rows in the screen's table, counted once the table has measured them: DataTable sizes
    its columns when idle, and a modal pushed before that (a loaded CI machine) froze the
    table behind it with squeezed columns."""
    table = app.screen.query_one("DataTable")
    measured = not table._require_update_dimensions and not table._updated_cells
    return table.row_count if measured else -1


async def workspaces(pilot) -> None:
    await on_screen(pilot, WorkspacesScreen)
    await until(pilot, lambda: _rows(pilot.app) == 4)
    await redrawn(pilot)


async def redrawn(pilot) -> None:
    """The table drawn afresh with its measured columns: a row drawn before the columns were
    measured (the cursor row, on a loaded machine) was kept squeezed in the table's cache."""
    table = pilot.app.screen.query_one("DataTable")
    table._clear_caches()
    table.refresh()
    await pilot.pause()


async def workspaces_light(pilot) -> None:
    pilot.app.theme = "geotrain-light"
    await workspaces(pilot)


async def workspace_detail(pilot) -> None:
    await workspaces(pilot)
    pilot.app.push_screen(WorkspaceDetailScreen(states.COMPLETED_ID))
    await on_screen(pilot, WorkspaceDetailScreen)
    view = pilot.app.screen.query_one(LogView)
    await until(pilot, lambda: view.ended and view.line_count == states.log_line_count())
    await until(pilot, lambda: view.max_scroll_y > 0 and view.scroll_y == view.max_scroll_y)
    await until(pilot, lambda: pilot.app.screen.query_one("#bytes").points != [])
    await until(pilot, lambda: pilot.app.screen.query_one("#loss").points != [])
    await until(pilot, lambda: "COMPLETED" in str(pilot.app.screen.query_one("#status").render()))


def _status_cells(app) -> set[str]:
    table = app.screen.query_one("DataTable")
    return {str(table.get_row(key)[4]) for key in table.rows}


async def workspace_states(pilot) -> None:
    """Two workspaces still starting, as the local supervisor reports them from the workers'
    own lines: one preparing its data, one waiting in the rendezvous."""
    from core.state import paths

    await workspaces(pilot)
    stop_on_exit(pilot.app, states.seed_starting(paths.home(), pilot.app.service.store))
    await pilot.press("r")
    await until(pilot, lambda: _rows(pilot.app) == 6
                and {"PREPARING_DATA", "RENDEZVOUS"} <= _status_cells(pilot.app))
    await pilot.press("home")
    await redrawn(pilot)


async def workspace_rendezvous(pilot) -> None:
    await workspace_states(pilot)
    pilot.app.push_screen(WorkspaceDetailScreen(states.RENDEZVOUS_ID))
    await on_screen(pilot, WorkspaceDetailScreen)
    view = pilot.app.screen.query_one(LogView)
    await until(pilot, lambda: view.line_count > 0 and view.scroll_y == view.max_scroll_y)
    await until(pilot, lambda: "waiting for" in str(pilot.app.screen.query_one("#status").render()))


async def delete_confirm(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("home", "d")  # the first row: the workspace on eu-west
    await on_screen(pilot, ConfirmScreen)


async def export_prompt(pilot) -> None:
    from tui.modals.export_dir import ExportDirScreen

    await workspaces(pilot)
    await pilot.press("home", "down", "d")  # the local workspace that completed
    await on_screen(pilot, ConfirmScreen)
    await pilot.press("e")
    await on_screen(pilot, ExportDirScreen)


async def deploy_form(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("c")
    await on_screen(pilot, DeployScreen)
    await until(pilot, lambda: pilot.app.screen.query_one("#size", Select).value == "tiny")
    await until(pilot, lambda: "Planner:" in str(pilot.app.screen.query_one("#plan").render()), 30)


async def deploy_custom(pilot) -> None:
    """The deploy form for your own code (issue 42): template custom-training, its command and directory."""
    await deploy_form(pilot)
    form = pilot.app.screen
    form.query_one("#template", Select).value = "custom-training"
    await until(pilot, lambda: form.query_one("#custom-row").display)
    form.query_one("#command", Input).value = "python train.py --epochs 1"
    form.query_one("#workdir", Input).value = "~/projects/my-model"


async def deploy_requirements(pilot) -> None:
    """The deploy form refusing a malformed W&B key: the requirements table, nothing submitted."""
    await deploy_form(pilot)
    pilot.app.screen.query_one("#wandb", Input).value = "not-a-key"
    await pilot.press("ctrl+s")
    await until(pilot, lambda: pilot.app.screen.query_one(RequirementsTable).row_count == 1, 30)


async def config_editor_error(pilot) -> None:
    await deploy_form(pilot)
    await pilot.press("ctrl+e")
    await on_screen(pilot, ConfigEditorScreen, 30)
    editor = pilot.app.screen.query_one(TextArea)
    editor.text = editor.text.replace("  lr: 0.003", "  lr: very-fast", 1)
    await pilot.press("ctrl+s")
    await until(pilot, lambda: bool(pilot.app.screen.problems), 30)
    await settled(pilot, lambda: (editor.scroll_offset, editor.cursor_location, editor.has_focus))


async def nodes(pilot) -> None:
    await pilot.press("2")
    await on_screen(pilot, NodesScreen)
    await until(pilot, lambda: _rows(pilot.app) == 2)
    await pilot.press("down")


async def node_import(pilot) -> None:
    await nodes(pilot)
    await pilot.press("i")
    await on_screen(pilot, NodeImportScreen)


async def passphrase(pilot) -> None:
    from tui.modals.passphrase import PassphraseScreen

    await node_import(pilot)
    pilot.app.push_screen(PassphraseScreen("~/.ssh/id_ed25519"))
    await on_screen(pilot, PassphraseScreen)
    await pilot.press(*"hunter2")  # shown as dots


async def help_keys(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("question_mark")
    await on_screen(pilot, HelpScreen)


async def error_modal(pilot) -> None:
    from core.errors import BackendError

    await workspaces(pilot)
    run_dir = f"{states.SHOWN_HOME}/workspaces/{states.PREPARING_ID}"  # the local backend's own words
    pilot.app.push_screen(ErrorScreen("Deploy failed", BackendError(
        "the local supervisor did not start", f"see {run_dir}/logs/supervisor.log")))
    await on_screen(pilot, ErrorScreen)


def release_on_exit(app, release) -> None:
    """A held deploy goes on once the app exits, i.e. after its picture is taken: a timed
    hold raced the picture on a loaded CI machine, and the app waits for its workers."""
    exit_app = app.exit

    def exit_and_release(*args, **kwargs):
        release.set()
        return exit_app(*args, **kwargs)
    app.exit = exit_and_release


def stop_on_exit(app, procs) -> None:
    """The stand-in supervisors a view started end with the app (after its picture)."""
    exit_app = app.exit

    def exit_and_stop(*args, **kwargs):
        states.stop(procs)
        return exit_app(*args, **kwargs)
    app.exit = exit_and_stop


async def _wizard(pilot, hold_at: str | None = None):
    from core.state.node_records import add_nodes
    from tests.tui.stand_in_builder import StandInClusterBuilder
    from tui.screens.cluster_wizard import ClusterWizardScreen

    app = pilot.app
    extra = states.recorded_nodes()[1]
    extra.name, extra.datacenter, extra.host = "par-3", "paris", "192.0.2.33"
    add_nodes(app.service.store, [extra])
    app.cluster_builder = StandInClusterBuilder(app.service.store, hold_at, hold_seconds=120)
    release_on_exit(app, app.cluster_builder.release)
    await pilot.press("3")
    await on_screen(pilot, ClusterWizardScreen)
    await until(pilot, lambda: app.screen.query_one("SelectionList").option_count == 3)
    return app.cluster_builder


async def wizard_pick(pilot) -> None:
    await _wizard(pilot)
    await pilot.press("space", "down", "space")


async def _wizard_deploy(pilot, hold_at: str | None):
    builder = await _wizard(pilot, hold_at)
    await pilot.press("space", "down", "space", "enter", "enter")
    await until(pilot, lambda: "preflight" in pilot.app.screen.outcomes)
    await pilot.press("enter")
    return builder


async def wizard_progress(pilot) -> None:
    from tui.widgets.progress_table import ProgressTable

    await _wizard_deploy(pilot, "k3s")
    table = pilot.app.screen.query_one("#deploy-table", ProgressTable)
    await until(pilot, lambda: table.states.get(("ams-2", "k3s")) == "running"
                and table.states.get(("par-3", "netmatrix")) == "done")
    # DataTable sizes the auto-width "latest" column on its next idle, not when a cell changes:
    # wait for the widths to stop changing, or the picture depends on how events were batched
    await settled(pilot, lambda: [column.get_render_width(table) for column in table.columns.values()])


async def wizard_done(pilot) -> None:
    await _wizard_deploy(pilot, None)
    await until(pilot, lambda: pilot.app.screen.stage == "done")


def _kept_checks(store) -> None:
    """Fixed `clusters check` results (verdicts by core.domain.check_results.judge): local all good; on
    eu-west ams-2 good and fra-1 failing its memory test, with the link between them."""
    import json

    from core.domain.check_results import judge
    from core.cluster_checks import SETTING

    def rank(r: int, device: str, flops: float, bad: int = 0, busbw: float = 2.1e9) -> dict:
        return {"rank": r, "device": device, "matmul_flops": flops, "memory_tested": 1 << 30, "memory_errors": bad,
                "reduce_bytes": 169_585_944, "reduce_seconds": 0.274, "busbw": busbw, "world": 2, "backend": "gloo"}

    local = judge("local", "local", [rank(0, "cpu", 3.5e10), rank(1, "cpu", 2.0e10, busbw=6.2e8)], [], [], 2,
                  at=states.NOW - 3600)
    ams = judge("eu-west", "ams-2", [rank(0, "NVIDIA A100-SXM4-80GB", 2.71e14)], [], [], 1, at=states.NOW - 600)
    fra = judge("eu-west", "fra-1", [rank(1, "NVIDIA A100-SXM4-80GB", 2.64e14, bad=12)], [], [], 1)
    ams["nodes"] += fra["nodes"]
    ams["ok"] = False
    ams["links"] = [{"name": "ams-2 ↔ fra-1 (gloo, over the mesh)", "bytes": 169_585_944, "seconds": 1.62,
                     "busbw": 1.05e8, "world": 2, "a": "ams-2", "b": "fra-1", "kind": "node", "ok": True,
                     "why": None, "slow": False, "ping_ms": 11.8, "probe_mbit_s": 94.0}]
    store.set_setting(SETTING.format("local"), json.dumps(local))
    store.set_setting(SETTING.format("eu-west"), json.dumps(ams))


async def clusters(pilot) -> None:
    """The Clusters view (issue 43): eu-west highlighted, its last check naming fra-1 with why."""
    from tui.screens.clusters import ClustersScreen

    _kept_checks(pilot.app.service.store)
    await pilot.press("4")
    await on_screen(pilot, ClustersScreen)
    await until(pilot, lambda: _rows(pilot.app) == 2)
    table = pilot.app.screen.query_one("#clusters")
    table.move_cursor(row=table.get_row_index("eu-west"))
    tables = list(pilot.app.screen.query("DataTable"))
    await until(pilot, lambda: pilot.app.screen.query_one("#check-devices").row_count == 2 and all(
        not t._require_update_dimensions and not t._updated_cells for t in tables))
    for table in tables:  # each drawn afresh with its measured columns (see redrawn)
        table._clear_caches()
        table.refresh()
    await settled(pilot, lambda: [c.get_render_width(t) for t in tables for c in t.columns.values()])


async def notify_form(pilot) -> None:
    """The notification form over a local workspace, an address kept (shown masked) and one being typed (hidden)."""
    from tui.modals.notify_form import NotifyFormScreen

    await workspace_detail(pilot)
    pilot.app.service.secrets.put(f"{states.COMPLETED_ID}/notify", "https://hooks.example.com/services/T0/B0/xyz")
    await pilot.press("N")
    await on_screen(pilot, NotifyFormScreen)
    await pilot.press(*"https://hooks.example.com/new")


VIEWS = {
    "workspaces": workspaces,
    "workspaces-light": workspaces_light,
    "workspace-detail": workspace_detail,
    "workspace-states": workspace_states,
    "workspace-rendezvous": workspace_rendezvous,
    "delete-confirm": delete_confirm,
    "export-prompt": export_prompt,
    "deploy-form": deploy_form,
    "deploy-custom": deploy_custom,
    "deploy-requirements": deploy_requirements,
    "config-editor-error": config_editor_error,
    "nodes": nodes,
    "node-import": node_import,
    "passphrase": passphrase,
    "wizard-pick": wizard_pick,
    "wizard-progress": wizard_progress,
    "wizard-done": wizard_done,
    "clusters": clusters,
    "notify-form": notify_form,
    "help": help_keys,
    "error": error_modal,
}
SIZE = (120, 36)


async def settled(pilot, state, rounds: int = 40) -> None:
    """Until `state()` stops changing between frames (the editor scrolls to the error)."""
    previous = None
    for _ in range(rounds):
        await pilot.pause(0.05)
        current = state()
        if current == previous:
            return
        previous = current


def steady(view):
    """`view`, then cursors that do not blink, so a picture does not depend on timing."""
    async def run(pilot) -> None:
        await view(pilot)
        for widget in pilot.app.screen.query("Input, TextArea"):
            widget.cursor_blink = False
        await pilot.pause()
    return run
