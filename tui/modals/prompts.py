"""Questions asked from worker threads (SSH host keys, key passphrases): the worker
shows a modal on the UI thread and waits for the answer."""

from __future__ import annotations

import threading

from textual.app import App
from textual.screen import ModalScreen

from tui.modals.confirm import ConfirmScreen
from tui.modals.passphrase import PassphraseScreen


def ask_from_thread(app: App, screen: ModalScreen):
    """Push `screen` from a worker thread and block until it is dismissed."""
    answered = threading.Event()
    answer: dict = {}

    def done(value) -> None:
        answer["value"] = value
        answered.set()

    app.call_from_thread(app.push_screen, screen, done)
    answered.wait()
    return answer.get("value")


def host_key_confirmer(app: App):
    """A core.nodes.ssh.ConfirmHostKey that asks the person in the app."""
    def confirm(label: str, key_type: str, fingerprint: str) -> bool:
        return bool(ask_from_thread(app, ConfirmScreen(
            f"Trust the host key of {label}?",
            f"The authenticity of {label} can't be established.\n{key_type} key fingerprint is"
            f" {fingerprint}.\nTrusting pins it in geotrain's known_hosts.", "y  trust")))
    return confirm


def passphrase_asker(app: App):
    """A core.nodes.ssh.AskPassphrase that asks the person in the app (None when they cancel)."""
    def ask(key_path: str) -> str | None:
        return ask_from_thread(app, PassphraseScreen(key_path))
    return ask
