"""Regenerate screenshots/*.svg from the same fixed app states as the snapshot tests.

    python -m tests.tui.make_screenshots [OUT_DIR]     # default: screenshots/
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def _shoot(name: str, out_dir: Path) -> Path:
    from tests.tui import states, views
    from tui.app import make_app

    # a released stand-in deploy (wizard-progress) may still write there as the app ends
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        home = Path(tmp) / "home"
        os.environ["GEOTRAIN_HOME"] = str(home)
        service, procs = states.seed(home)
        try:
            app = make_app(service, **states.app_options())
            async with app.run_test(size=views.SIZE) as pilot:
                await views.steady(views.VIEWS[name])(pilot)
                path = out_dir / f"{name}.svg"
                app.save_screenshot(filename=path.name, path=str(out_dir))
                app.exit()  # as the snapshot test does: lets a held stand-in deploy go on
        finally:
            states.stop(procs)
    return path


def main(argv: list[str]) -> int:
    from tests.tui import views

    out_dir = Path(argv[0]) if argv else ROOT / "screenshots"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in views.VIEWS:
        print(asyncio.run(_shoot(name, out_dir)).relative_to(out_dir.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
