"""Data the app did not write (log lines, failure reasons, facts, hosts) holding Rich
markup is shown literally and the app keeps running; the config editor's esc cancels;
a crash report shows no local variables (a token in a frame stays private)."""

import asyncio
import json

import pytest
from textual.widgets import DataTable, Static, TextArea

from core.domain.records import Node, WorkspaceSpec
from core.state.node_records import add_nodes
from core.state.store import Store
from core.workspaces import WorkspaceService
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.config_editor import ConfigEditorScreen
from tui.screens.nodes import NodesScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.modals.confirm import ConfirmScreen
from tui.modals.error import ErrorScreen

GLOO = ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
        "[10.0.0.2]:1234: Connection reset by peer")
HOSTILE = [GLOO, "[@click=app.quit]quit[/]", "[/]", "[bold red]not bold[/bold red]", "[link=file:///etc/passwd]x",
           "[b", "\\[escaped]", "[on #ff0000 blink]", "[/not-open]"]
WS_ID = "gcn-badbad"


def _seed_hostile(home) -> None:
    """A failed workspace whose logs and failure reason, and a node whose host, datacenter,
    facts and blockers, hold markup (as a peer, a log or a server could write them)."""
    store = Store()
    run = home / "workspaces" / WS_ID
    (run / "logs").mkdir(parents=True)
    (run / "out").mkdir()
    (run / "launch.json").write_text(json.dumps({"workspace_id": WS_ID}))
    (run / "logs" / "worker-0.log").write_text("\n".join(HOSTILE) + "\n")
    (run / "logs" / "worker-1.log").write_text("".join(f"RuntimeError: {line}\n" for line in HOSTILE))
    (run / "logs" / "launcher.log").write_text(f"RuntimeError: {GLOO} [@click=app.quit]\n")
    (run / "exit_code").write_text("1")
    spec = WorkspaceSpec(cluster="local", model="gcn", size="tiny", preset="high", workers=2, steps=10,
                         config={})
    with store.write() as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, run_dir, last_loss, created_at,"
                     " updated_at) VALUES (?,?,?,?,?,?,?,?)",
                     (WS_ID, "local", json.dumps(spec.to_dict()), "FAILED", str(run), None,
                      states.NOW, states.NOW))
    facts = {"system": {"os_name": "Ubuntu [red]22.04[/]", "kernel": "[/]", "arch": "[@click=app.quit]"},
             "gpus": [{"name": "NVIDIA A100 [/] [@click=app.quit]"}], "cpu": {"model": "[b]Xeon", "cores": 8},
             "containerd": {"version": "[/containerd]"}, "public_ip": "[10.0.0.2]"}
    add_nodes(store, [Node(name="gpu1", host="[gpu1.example.com]", username="ubuntu",
                           datacenter="[@click=app.quit]", status="BLOCKED", blockers=[GLOO], facts=facts)])


def _text(widget) -> str:
    return str(widget.render())


def test_markup_in_logs_reasons_facts_and_hosts_is_shown_literally(geotrain_home):
    _seed_hostile(geotrain_home)
    app = make_app(WorkspaceService(), **states.app_options())

    async def run():
        async with app.run_test(size=(160, 45)) as pilot:
            table = app.screen.query_one(DataTable)
            await until(pilot, lambda: WS_ID in [k.value for k in table.rows])
            app.push_screen(WorkspaceDetailScreen(WS_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            status = app.screen.query_one("#status", Static)
            await until(pilot, lambda: "FAILED" in _text(status))
            assert GLOO in _text(status) and "[@click=app.quit]" in _text(status)
            view = app.screen.query_one("#log")
            await until(pilot, lambda: view.line_count >= 2 * len(HOSTILE) and view.ended)
            shown = "\n".join(view.visible_text())
            assert GLOO in shown and "[@click=app.quit]quit[/]" in shown
            await pilot.click("#status", offset=(30, 2))  # where a live link would sit
            app.pop_screen()

            await pilot.press("2")
            await on_screen(pilot, NodesScreen)
            nodes = app.screen.query_one(DataTable)
            await until(pilot, lambda: "gpu1" in [k.value for k in nodes.rows])
            row = [str(c) for c in nodes.get_row("gpu1")]
            assert row[1] == "[@click=app.quit]" and row[3] == "1× A100 [/] [@click=app.quit]"
            for x in range(0, 100, 4):  # click across the row: nothing in it is an action
                await pilot.click(DataTable, offset=(x, 1))
            details = _text(app.screen.query_one("#details"))
            for literal in ("ubuntu@[gpu1.example.com]:22", "Ubuntu [red]22.04[/]", "[b]Xeon",
                            "[/containerd]", "[10.0.0.2]", f"✗ {GLOO}"):
                assert literal in details, literal

            app.push_screen(ConfirmScreen(f"Remove {HOSTILE[1]}?", GLOO))
            await on_screen(pilot, ConfirmScreen)
            assert "[@click=app.quit]" in _text(app.screen.query(Static).first())
            await pilot.press("n")
            app.push_screen(ErrorScreen(f"{GLOO} failed", RuntimeError(HOSTILE[1])))
            await on_screen(pilot, ErrorScreen)
            assert GLOO in _text(app.screen.query(Static).first())
            await pilot.press("escape")
            app.notify(GLOO, markup=False)
            await pilot.pause()
            assert app.is_running and app.return_code is None  # no crash, nothing quit it
            await pilot.press("1")
            assert app.is_running
    asyncio.run(run())


def test_esc_leaves_the_config_editor_without_saving(geotrain_home):
    app = make_app(WorkspaceService(), **states.app_options())
    results = []

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(ConfigEditorScreen("steps: 10\n"), results.append)
            await on_screen(pilot, ConfigEditorScreen)
            editor = app.screen.query_one(TextArea)
            assert editor.has_focus  # the TextArea has escape handling of its own
            await pilot.press("x", "y")
            assert "xy" in editor.text
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, ConfigEditorScreen))
    asyncio.run(run())
    assert results == [None]


def test_config_editor_errors_speak_of_the_editor_not_the_cli(geotrain_home):
    from core.schema.training_config import check_config_text
    from core.domain.recipe_catalog import default_config

    import yaml

    config = default_config("gpt-neo", "tiny")
    config["steps"] = "many"
    problems = check_config_text(yaml.safe_dump(config))
    assert problems and all("--set" not in p.message for p in problems), problems


def test_a_crash_report_shows_no_local_variables(geotrain_home, capfd):
    """Textual's default report prints each frame's locals (rich Traceback show_locals=True)."""
    app = make_app(WorkspaceService(), **states.app_options())
    token = "hf_" + "S3cr3tT0k3n" * 3

    def deploy_with(secret_value: str) -> None:
        raise RuntimeError("boom while deploying")

    async def run():
        async with app.run_test(size=(100, 30)) as pilot:
            app.call_later(deploy_with, token)
            await pilot.pause(0.2)
    with pytest.raises(RuntimeError, match="boom while deploying"):
        asyncio.run(run())
    report = "".join(capfd.readouterr())  # the report Textual printed on the way out
    assert "boom while deploying" in report and "deploy_with" in report
    assert token not in report and "secret_value =" not in report  # Rich shows locals as `name = value`
