"""The delete confirmation says how much will be lost and offers `e`: export first (a
directory prompt), then asks again; a refused directory is a notification, nothing lost."""

import asyncio
import json
from pathlib import Path

from textual.widgets import DataTable, Input

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.actions import default_export_dir
from tui.modals.confirm import ConfirmScreen
from tui.modals.export_dir import ExportDirScreen


def _checkpoint(run_dir: Path, step: int) -> None:
    folder = run_dir / "out" / "checkpoints" / f"step_{step:08d}"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"rank_{rank}.pt").write_bytes(b"\0" * 1500)
        (folder / f"rank_{rank}.json").write_text(json.dumps({"step": step, "rank": rank}))


def _rows(app) -> list[str]:
    return [key.value for key in app.screen.query_one(DataTable).rows]


def test_e_exports_first_then_delete_asks_again(app, seeded, tmp_path):
    _, home = seeded
    run_dir = home / "workspaces" / states.COMPLETED_ID
    _checkpoint(run_dir, 200)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("x")
    dest = tmp_path / "kept"

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(_rows(app)) == 4)
            await pilot.press("home", "down", "d")
            await on_screen(pilot, ConfirmScreen)
            body = app.screen.body
            assert "1 checkpoint(s) (3.0 KB, newest at step 200)" in body and "200 trained steps" in body
            assert "of logs" in body and app.screen.other_keys == {"e": "export first"}
            await pilot.press("e")
            await on_screen(pilot, ExportDirScreen)
            box = app.screen.query_one("#export-dir", Input)
            assert box.value == default_export_dir(states.COMPLETED_ID) == f"~/geotrain-exports/{states.COMPLETED_ID}"
            box.value = str(taken)  # not empty: refused, asked again, nothing deleted
            await pilot.press("enter")
            await on_screen(pilot, ConfirmScreen)
            assert run_dir.exists() and not (taken / "geotrain-export.json").exists()
            await pilot.press("e")
            await on_screen(pilot, ExportDirScreen)
            app.screen.query_one("#export-dir", Input).value = str(dest)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                        and app.screen.body.startswith(f"Exported to {dest}"))
            assert "checkpoint at step 200" in app.screen.body
            await pilot.press("y")
            await until(pilot, lambda: states.COMPLETED_ID not in _rows(app))
    asyncio.run(run())
    assert not run_dir.exists()
    manifest = json.loads((dest / "geotrain-export.json").read_text())
    assert manifest["checkpoint_steps"] == [200] and manifest["workspace"] == states.COMPLETED_ID
    assert "[rank 1] step 200/200 " in (dest / "logs" / "worker-1.log").read_text()
    assert (dest / "checkpoints" / "step_00000200" / "rank_1.pt").stat().st_size == 1500
