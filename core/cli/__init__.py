"""The headless commands: `geotrain <group> <command>` (tui/entry.py opens the app when there are none).

Each module in COMMAND_MODULES registers commands into the groups it names
(`register(groups)`, argparse-style declarations that core/cli/declare.py builds as click
commands). Handlers take the parsed args and return an exit code. Bad input is one line on
stderr and exit 2, as for every other error.

A group imports its command modules the first time it is asked for a command, so
`geotrain --help`, a <Tab> and `geotrain nodes list` load only what they use (issue 45).

May import any core folder; never tui (tui/entry.py opens the app).
"""

from __future__ import annotations

import importlib
import sys

import click
from click.shell_completion import get_completion_class

import core
from core.cli.declare import GroupDeclaration
from core.domain.terminal_text import printable
from core.errors import GeotrainError

PROG = "geotrain"
COMPLETE_VAR = "_GEOTRAIN_COMPLETE"
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
GROUPS = {
    "workspaces": "deploy and manage training workspaces",
    "clusters": "list, build and register clusters",
    "nodes": "the node pool: servers imported over SSH",
}
COMMAND_MODULES = {  # group -> the modules that register its commands, in listing order
    "workspaces": ["core.cli.workspaces", "core.cli.workspace_results", "core.cli.workspace_drilldown",
                   "core.cli.workspace_notify"],
    "clusters": ["core.cli.clusters", "core.cli.cluster_kubernetes", "core.cli.cluster_bootstrap",
                 "core.cli.cluster_plan", "core.cli.cluster_check"],
    "nodes": ["core.cli.nodes"],
}


class _Group(click.Group):
    """Commands listed in the order they were declared, as argparse listed them."""

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)


class _LazyGroup(_Group):
    """A group whose command modules are imported when one of its commands is first needed."""

    def __init__(self, *args, modules: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._modules = modules

    def _load(self) -> None:
        modules, self._modules = self._modules, []
        for module in modules:
            importlib.import_module(module).register({self.name: GroupDeclaration(self)})

    def get_command(self, ctx, cmd_name: str):
        self._load()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx) -> list[str]:
        self._load()
        return super().list_commands(ctx)


def _print_version(ctx: click.Context, param, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # importlib.metadata (~10 ms) only for --version
        click.echo(f"{PROG} {core.version()}")
        ctx.exit()


@click.command("completion", context_settings=HELP_OPTIONS, short_help="print the shell completion script")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def _completion(shell: str) -> int:
    """Print the shell completion script; e.g. `eval "$(geotrain completion bash)"` in ~/.bashrc."""
    script = get_completion_class(shell)(build_parser(), {}, PROG, COMPLETE_VAR).source()
    click.echo(script)
    return 0


def build_parser() -> click.Group:
    """The whole command tree (named for what it was under argparse; callers only parse with it)."""
    cli = _Group(PROG, help="Train models across datacenters.", context_settings=HELP_OPTIONS)
    click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
                 help="Show the version and exit.")(cli)
    for name, help_text in GROUPS.items():
        cli.add_command(_LazyGroup(name, help=help_text, short_help=help_text, context_settings=HELP_OPTIONS,
                                   no_args_is_help=True, modules=COMMAND_MODULES[name]))
    cli.add_command(_completion)
    return cli


def _usage_error(exc: click.UsageError) -> int:
    """Print click's usage error as today's one line: what is wrong and where the help is."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and exc.ctx is not None:
        click.echo(exc.ctx.get_help())  # `geotrain nodes`: the group's help, exit 2
        return 2
    ctx = exc.ctx or click.get_current_context(silent=True)
    prog = ctx.command_path if ctx is not None else PROG
    message = " ".join(exc.format_message().split()).rstrip(".")
    print(f"error: {message} — see `{prog} --help`", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        result = build_parser().main(args=list(argv), prog_name=PROG, complete_var=COMPLETE_VAR,
                                     standalone_mode=False)
    except click.UsageError as exc:
        return _usage_error(exc)
    except GeotrainError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)  # may carry a server's or a pod's words
        return 2
    except (KeyboardInterrupt, click.exceptions.Abort):
        return 130
    except click.ClickException as exc:
        print(f"error: {printable(' '.join(exc.format_message().split()))}", file=sys.stderr)
        return exc.exit_code
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
