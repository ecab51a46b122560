"""The workspace detail names the W&B run: its URL online, or for an offline run the command
that uploads it (the file the recipe's telemetry writes when its run starts)."""

import asyncio
import json

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen


def _status(app) -> str:
    return str(app.screen.query_one("#status").render())


def test_detail_shows_the_offline_run_and_its_sync_command(app, seeded, tmp_path):
    _, home = seeded
    out = home / "workspaces" / states.COMPLETED_ID / "out"
    sync_dir = out / "wandb" / "offline-run-20261123_010101-abc"  # where the recipe's run writes it
    sync_dir.mkdir(parents=True)
    (out / "wandb_run.json").write_text(json.dumps({"mode": "offline", "project": "geotrain-x",
                                                    "id": "abc", "url": None, "sync_dir": str(sync_dir)}))
    online = home / "workspaces" / states.FAILED_ID / "out"
    (online / "wandb_run.json").write_text(json.dumps({"mode": "online", "project": "team",
                                                       "url": "https://wandb.ai/me/team/runs/abc"}))

    async def run():
        async with app.run_test(size=(160, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.COMPLETED_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            await until(pilot, lambda: "W&B" in _status(app))
            shown = " ".join(_status(app).split())
            assert f"W&B offline; upload: geotrain workspaces sync {states.COMPLETED_ID}" in shown
            app.pop_screen()
            app.push_screen(WorkspaceDetailScreen(states.FAILED_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            await until(pilot, lambda: "W&B" in _status(app))
            assert "W&B: https://wandb.ai/me/team/runs/abc" in _status(app)
    asyncio.run(run())
