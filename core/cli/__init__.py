"""The headless commands: `geotrain <group> <command>` (tui/entry.py opens the app when there are none).

Each module in COMMAND_MODULES registers commands into the groups it names
(`register(groups)` where groups maps "workspaces"/"clusters"/"nodes" to argparse
subparsers). Handlers take the parsed args and return an exit code.

May import any core folder; never tui (tui/entry.py opens the app).
"""

from __future__ import annotations

import argparse
import importlib
import sys

import core
from core.errors import GeotrainError

GROUPS = {
    "workspaces": "deploy and manage training workspaces",
    "clusters": "list, build and register clusters",
    "nodes": "the node pool: servers imported over SSH",
}
COMMAND_MODULES = [
    "core.cli.workspaces",
    "core.cli.clusters",
    "core.cli.nodes",
    "core.cli.cluster_kubernetes",
    "core.cli.cluster_bootstrap",
    "core.cli.cluster_plan",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line with what to do, exit 2
        self.exit(2, f"error: {message} — see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="geotrain", description="Train models across datacenters.")
    parser.add_argument("--version", action="version", version=f"geotrain {core.version()}")
    top = parser.add_subparsers(dest="group", parser_class=_Parser)
    groups = {}
    for name, help_text in GROUPS.items():
        group = top.add_parser(name, help=help_text, description=help_text)
        groups[name] = group.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
        group.set_defaults(_group_parser=group)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        (getattr(args, "_group_parser", None) or parser).print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except GeotrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
