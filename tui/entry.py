"""The `geotrain` command: no arguments open the app; anything else is a headless command.

The app lives in tui/ and the commands in core/cli/; only this entry point knows both, so
core never imports the UI.
"""

from __future__ import annotations

import os
import sys

from core import cli


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv or os.environ.get(cli.COMPLETE_VAR):  # a <Tab> in the shell asks the commands, not the app
        return cli.main(argv)
    from tui.app import run_app

    return run_app()


if __name__ == "__main__":
    sys.exit(main())
