"""The notification form (issue 43): `N` on a local workspace's view; the webhook's address is typed
hidden, kept in the secret store (0600) and shown back only as scheme and host; a command is checked
(a program not found: one line, nothing kept); ctrl+r removes both; on a Kubernetes workspace the form
has the webhook only (its watcher in the cluster sends; the Secret's own tests: tests/kubernetes/test_watcher_notify.py)."""

import asyncio
import json
import shutil

from textual.widgets import Input, Static

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.modals.notify_form import NotifyFormScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen

HOOK = "https://hooks.example.com/services/T0SECRET/B0SECRET/credential-XYZ"


def text(app, widget_id: str) -> str:
    return " ".join(str(app.screen.query_one(widget_id, Static).render()).split())


def test_the_form_keeps_the_address_as_a_secret_and_masks_it(app, seeded):
    service, home = seeded

    async def run():
        async with app.run_test(size=(140, 44)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.COMPLETED_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            await pilot.press("N")
            await on_screen(pilot, NotifyFormScreen)
            assert text(app, "#notify-now") == "Now: nothing set."
            url_box = app.screen.query_one("#notify-url", Input)
            assert url_box.password and app.focused is url_box
            await pilot.press(*HOOK)
            assert "T0SECRET" not in app.export_screenshot()  # typed hidden
            await pilot.press("tab", *"no-such-program-xyz --to me", "enter")
            await until(pilot, lambda: "not found" in text(app, "#notify-error"))
            assert isinstance(app.screen, NotifyFormScreen) and "no-such-program-xyz" not in service.secrets.values()
            assert HOOK not in service.secrets.values()  # both checked before either is kept
            command = app.screen.query_one("#notify-command", Input)
            command.value = "true --quiet"
            await pilot.press("enter")
            await on_screen(pilot, WorkspaceDetailScreen)
            await until(pilot, lambda: any("kept as secrets" in n.message for n in app._notifications))
            store = home / "secrets.json"
            kept = json.loads(store.read_text())
            assert kept[f"{states.COMPLETED_ID}/notify"] == HOOK and kept[f"{states.COMPLETED_ID}/notify-command"] == \
                f"{shutil.which('true')} --quiet"  # the program kept as the absolute path found
            assert oct(store.stat().st_mode & 0o777) == "0o600"
            await pilot.press("N")  # again: shown back masked
            await on_screen(pilot, NotifyFormScreen)
            assert text(app, "#notify-now") == "Now: webhook https://hooks.example.com/••• · command true …"
            assert "T0SECRET" not in app.export_screenshot() and "--quiet" not in app.export_screenshot()
            await pilot.press("ctrl+r")
            await on_screen(pilot, WorkspaceDetailScreen)
            assert f"{states.COMPLETED_ID}/notify" not in store.read_text()
            app.pop_screen()
            remote = WorkspaceDetailScreen(states.REMOTE_ID)
            app.push_screen(remote)
            await until(pilot, lambda: remote.is_mounted)
            # the key's action itself: the seeded Kubernetes workspace's log reader may put its error
            # modal on top first (its cluster has no kubeconfig), which would take the key press
            remote.action_notify_form()
            # the webhook only (the watcher in the cluster sends; a command would run here): no command field
            await until(pilot, lambda: any(isinstance(s, NotifyFormScreen) and s.query("#notify-url")
                                           for s in app.screen_stack),
                        timeout=30)  # the Kubernetes backend loads the client first (seconds on a busy machine)
            # the form itself (the log reader's error modal may come above it at any moment)
            form = next(s for s in app.screen_stack if isinstance(s, NotifyFormScreen))
            shown = lambda wid: " ".join(str(form.query_one(wid, Static).render()).split())  # noqa: E731
            assert not form.query("#notify-command") and "not read back" in shown("#notify-now")
            form.query_one("#notify-url", Input).value = HOOK
            form.save()  # enter: its cluster has no kubeconfig, so the reason in the form, nothing kept here
            await until(pilot, lambda: "has no kubeconfig" in shown("#notify-error"), timeout=30)
            assert form in app.screen_stack and HOOK not in service.secrets.values()
            assert "T0SECRET" not in app.export_screenshot()
    asyncio.run(run())
    assert not [p for p in home.rglob("*") if p.is_file() and p.name != "secrets.json" and b"T0SECRET" in p.read_bytes()]
