"""Pilot tests of the node pool: table and details, remove with confirmation, and an
import from the form against a real sshd test host (root), host key confirmed in a modal."""

import asyncio
import subprocess

from textual.widgets import DataTable, Input

from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.node_import import NodeImportScreen
from tui.screens.nodes import NodesScreen
from tui.modals.confirm import ConfirmScreen
from tui.modals.passphrase import PassphraseScreen


def _names(app) -> list[str]:
    return [key.value for key in app.screen.query_one(DataTable).rows]


async def _open_import_form(pilot) -> None:
    await pilot.press("2")
    await on_screen(pilot, NodesScreen)
    await pilot.press("i")
    await on_screen(pilot, NodeImportScreen)


def test_nodes_table_details_and_remove(app, seeded):
    service, _ = seeded

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("2")
            await on_screen(pilot, NodesScreen)
            await until(pilot, lambda: _names(app) == ["ams-2", "fra-1"])
            table = app.screen.query_one(DataTable)
            fra = [str(c) for c in table.get_row("fra-1")]
            assert fra[:4] == ["fra-1", "frankfurt", "BLOCKED", "8× A100-SXM4-80GB"]
            assert "docker" in fra[7].lower()
            await pilot.press("down")
            details = str(app.screen.query_one("#details").render())
            assert "Ubuntu 22.04" in details and "224 cores" in details
            await pilot.press("d")
            await on_screen(pilot, ConfirmScreen)
            await pilot.press("y")
            await until(pilot, lambda: _names(app) == ["ams-2"])
    asyncio.run(run())
    from core.state.node_records import list_nodes
    assert [n.name for n in list_nodes(service.store)] == ["ams-2"]


def test_import_a_node_from_the_form_against_a_test_host(make_test_hosts, geotrain_home,
                                                        monkeypatch):
    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")
    (host,) = make_test_hosts(1, prefix="gtt", subnet="10.213.0.0/24")
    app = make_app(poll_seconds=0)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_import_form(pilot)
            for field, value in (("name", "dc1-gpu"), ("endpoint", host.endpoint),
                                 ("username", host.user), ("key", host.key_path),
                                 ("datacenter", "dc-1")):
                app.screen.query_one(f"#{field}", Input).value = value
            await pilot.press("ctrl+s")
            await on_screen(pilot, ConfirmScreen, 30)  # a new host key: asked, as ssh would
            assert host.fingerprint in app.screen.body
            await pilot.press("y")
            await on_screen(pilot, NodesScreen, 60)
            await until(pilot, lambda: _names(app) == ["dc1-gpu"], 10)
            row = [str(c) for c in app.screen.query_one(DataTable).get_row("dc1-gpu")]
            assert row[1:3] == ["dc-1", "AVAILABLE"]
    asyncio.run(run())


def test_an_encrypted_key_is_unlocked_with_a_passphrase_typed_in_a_modal(make_test_hosts, geotrain_home,
                                                                       monkeypatch, tmp_path):
    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")
    (host,) = make_test_hosts(1, prefix="gtp", subnet="10.214.0.0/24")
    key = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret-phrase", "-f", str(key)], check=True)
    host.authorize_key(f"{key}.pub")
    app = make_app(poll_seconds=0)

    async def submit(pilot) -> None:
        for field, value in (("name", "locked-1"), ("endpoint", host.endpoint), ("username", host.user),
                             ("key", str(key)), ("datacenter", "dc-1")):
            app.screen.query_one(f"#{field}", Input).value = value
        await pilot.press("ctrl+s")
        await on_screen(pilot, PassphraseScreen, 30)
        assert str(key) in str(app.screen.query_one(".dialog-body").render())

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_import_form(pilot)
            await submit(pilot)
            await pilot.press("escape")  # cancelled: said under the form, nothing imported
            await on_screen(pilot, NodeImportScreen, 10)
            await until(pilot, lambda: "no passphrase was given" in
                        str(app.screen.query_one("#form-error").render()), 30)
            await submit(pilot)
            box = app.screen.query_one("#passphrase", Input)
            assert box.password  # typed hidden
            await pilot.press(*"s3cret-phrase", "enter")
            await on_screen(pilot, ConfirmScreen, 30)  # then the new host key, as ssh would
            await pilot.press("y")
            await on_screen(pilot, NodesScreen, 60)
            await until(pilot, lambda: _names(app) == ["locked-1"], 10)
    asyncio.run(run())
    stored = "".join(p.read_text(errors="replace") for p in geotrain_home.rglob("*") if p.is_file())
    assert "s3cret-phrase" not in stored  # the passphrase is used, never kept


def test_import_form_shows_what_is_wrong_inline_and_adds_nothing(app, seeded, tmp_path):
    service, _ = seeded
    bad = tmp_path / "servers.yaml"
    bad.write_text("nodes:\n  - name: x\n    endpoint: [\n")

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_import_form(pilot)
            error = app.screen.query_one("#form-error")
            await pilot.press("ctrl+s")
            await until(pilot, lambda: "endpoint" in str(error.render()))
            app.screen.query_one("#file", Input).value = str(bad)
            await pilot.press("ctrl+s")
            await until(pilot, lambda: "servers.yaml" in str(error.render()))
            assert isinstance(app.screen, NodeImportScreen)
    asyncio.run(run())
    from core.state.node_records import list_nodes
    assert [n.name for n in list_nodes(service.store)] == ["ams-2", "fra-1"]
