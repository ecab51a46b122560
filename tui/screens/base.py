"""What every geotrain screen shares: failed workers become the error modal.

Worker.StateChanged does not bubble, so each screen forwards it to the app's one
handler (GeotrainApp.on_worker_state_changed)."""

from __future__ import annotations

from textual.screen import Screen
from textual.worker import Worker


class GeotrainScreen(Screen):
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.app.on_worker_state_changed(event)
