"""Commands declared argparse-style (`add_parser`/`add_argument`/`set_defaults`) and built as click.

Each command module keeps its short declarative `register(groups)` and its `cmd_*(args)`
handlers; this adapter turns every declaration into a click parameter and calls the handler
with a namespace of click's values, so flags, defaults, help and exit codes stay as they were.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import click

from core.cli import complete

COMPLETERS = {"workspace": complete.workspace_ids, "node": complete.node_names,
              "node-list": complete.node_name_lists,
              "cluster": complete.cluster_names, "model": complete.models, "size": complete.sizes,
              "preset": complete.presets}


class _Typed(click.ParamType):
    """An argparse `type=` callable as a click type; its errors keep argparse's wording."""

    def __init__(self, convert: Callable[[str], Any]):
        self._convert = convert
        self.name = getattr(convert, "__name__", "value")

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            return self._convert(value)
        except argparse.ArgumentTypeError as exc:
            self.fail(str(exc), param, ctx)
        except (TypeError, ValueError):
            self.fail(f"invalid {self.name} value: {value!r}", param, ctx)


class _GreedyOption(click.Option):
    """argparse's `nargs="+"` on an option: `--from-ssh-config a b` takes every value up to the next flag."""

    def add_to_parser(self, parser, ctx) -> None:
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name) or parser._short_opt.get(name)
            if option is None:
                continue
            process = option.process

            def greedy(value, state, process=process):
                process(value, state)
                while state.rargs and not state.rargs[0].startswith("-"):
                    process(state.rargs.pop(0), state)
            option.process = greedy


class _LaterHelpOption(click.Option):
    """An option whose help is worked out when it is first shown (`help` given as a callable):
    help that reads a data file (the presets) costs nothing to a command that does not show it."""

    def __init__(self, *args: Any, later: Callable[[], str], **kwargs: Any) -> None:
        self._later: Callable[[], str] | None = later
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str | None:  # type: ignore[override]
        if self._later is not None:
            self._help, self._later = self._later(), None
        return self._help

    @help.setter
    def help(self, value: str | None) -> None:
        self._help = value


def _param(names: tuple[str, ...], kw: dict[str, Any]) -> click.Parameter:
    """One argparse `add_argument` as a click Argument or Option."""
    action, nargs, choices = kw.get("action"), kw.get("nargs"), kw.get("choices")
    kind = kw.get("type")
    ptype = click.Choice(list(choices)) if choices else (_Typed(kind) if kind else None)
    completer = COMPLETERS.get(kw.get("complete", ""))
    extra = {"shell_complete": completer} if completer else {}
    if not names[0].startswith("-"):
        dest = kw.get("dest", names[0]).replace("-", "_")
        required, many = nargs not in ("?", "*"), nargs in ("*", "+")
        metavar = kw.get("metavar") or ("{" + "|".join(choices) + "}" if choices else dest.upper())
        metavar = (metavar if required else f"[{metavar}]") + ("..." if many else "")
        if "default" in kw:  # click 8.3+ reads an explicit default=None as a value given
            extra["default"] = kw["default"]
        return click.Argument([dest], type=ptype, required=required, nargs=-1 if many else 1,
                              metavar=metavar, **extra)
    long = next((n for n in names if n.startswith("--")), names[0])
    dest = kw.get("dest") or long.lstrip("-").replace("-", "_")
    metavar = kw.get("metavar") or (None if choices or action else dest.upper())  # argparse's default
    later = kw.get("help") if callable(kw.get("help")) else None
    common = dict(help=None if later else (kw.get("help") or "").replace("%%", "%") or None, metavar=metavar,
                  **extra)
    if action == "store_true":
        return click.Option([*names, dest], is_flag=True, default=False, **common)
    if action == "append" or nargs == "+":
        cls = _GreedyOption if nargs == "+" else click.Option
        return cls([*names, dest], multiple=True, type=ptype, **common)
    if "default" in kw:  # click 8.3+ reads an explicit default=None as a value given
        common["default"] = kw["default"]
    if later:
        return _LaterHelpOption([*names, dest], type=ptype, required=kw.get("required", False),
                                show_default=False, later=later, **common)
    return click.Option([*names, dest], type=ptype, required=kw.get("required", False),
                        show_default=False, **common)


def _namespace(values: dict[str, Any]) -> argparse.Namespace:
    """click's values as the args the handlers read: lists where argparse gave lists."""
    return argparse.Namespace(**{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()})


class CommandDeclaration:
    """What `add_parser` returns: collects arguments, then calls the handler with them."""

    def __init__(self, command: click.Command):
        self.command = command
        self._argument_help: list[str] = []

    def add_argument(self, *names: str, **kw: Any) -> None:
        self.command.params.append(_param(names, kw))
        if not names[0].startswith("-") and kw.get("help"):
            self._argument_help.append(f"{names[0].upper()}: {kw['help']}")
            self.command.help = "\n\n".join([self._summary, *self._argument_help])

    @property
    def _summary(self) -> str:
        return (self.command.help or "").split("\n\n")[0]

    def set_defaults(self, handler: Callable[[argparse.Namespace], int]) -> None:
        self.command.callback = lambda **values: handler(_namespace(values))


class GroupDeclaration:
    """What `groups[name]` is in `register(groups)`: `add_parser` adds a click command."""

    def __init__(self, group: click.Group):
        self.group = group

    def add_parser(self, name: str, help: str | None = None, description: str | None = None,
                   ) -> CommandDeclaration:
        command = click.Command(name, help=description or help, short_help=help,
                                context_settings={"help_option_names": ["-h", "--help"]})
        self.group.add_command(command)
        return CommandDeclaration(command)
