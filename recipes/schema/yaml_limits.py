"""YAML read within limits: size, nesting depth and alias expansion ("billion laughs").

The one bounded reader for everything geotrain reads, in the schema module both sides
share: core wraps `YamlRefused` in a one-line InvalidInput (core/schema/yaml_loader.py),
the recipes in a ConfigError. A refused file fails while parsing, long before any work.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_CHARS = 4 * 1024 * 1024  # far above any spec, config, node list or kubeconfig we expect
MAX_DEPTH = 64  # nesting levels of mappings and lists
MAX_VALUES = 200_000  # values in the document once every alias is expanded


class YamlRefused(ValueError):
    """Text refused: `problem` says why, `line` (1-based) where, when known."""

    def __init__(self, problem: str, line: int | None, malformed: bool = True) -> None:
        super().__init__(problem)
        self.problem, self.line, self.malformed = problem, line, malformed


class _Refused(Exception):
    """A limit was hit while composing; carries the mark it was hit at."""

    def __init__(self, what: str, mark: Any) -> None:
        super().__init__(what)
        self.what, self.mark = what, mark


class _Limits:
    """Mixin for a SafeLoader: counts depth while composing (the composer recurses) and
    flow brackets while scanning (the scanner looks ahead over all of them at once)."""

    _depth = 0

    def fetch_flow_collection_start(self, token_class):  # noqa: D401 - yaml's own hook
        if self.flow_level >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent, index):  # noqa: D401 - yaml's own hook
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _limited(base: type) -> type:
    return type(f"Limited{base.__name__}", (_Limits, base), {})


_SAFE = _limited(yaml.SafeLoader)


def _expanded_size(node: yaml.Node, seen: dict[int, int]) -> int:
    """Values under `node` counting each alias as a full copy (memoised: linear time)."""
    if id(node) in seen:
        if seen[id(node)] == 0:
            raise _Refused("refers to itself (an alias inside its own anchor)", node.start_mark)
        return seen[id(node)]
    seen[id(node)] = 0  # in progress
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_expanded_size(child, seen) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_expanded_size(k, seen) + _expanded_size(v, seen) for k, v in node.value)
    if total > MAX_VALUES:
        raise _Refused(f"expands to more than {MAX_VALUES} values (an alias bomb?)", node.start_mark)
    seen[id(node)] = total
    return total


def _line(mark: Any) -> int | None:
    return mark.line + 1 if mark else None


def compose(text: str, loader: type = yaml.SafeLoader) -> yaml.Node | None:
    """The checked node tree of `text` (None when empty); YamlRefused past any limit."""
    if len(text) > MAX_CHARS:
        raise YamlRefused(f"is {len(text)} characters, more than the {MAX_CHARS} geotrain reads", None,
                          malformed=False)
    parser = (_SAFE if loader is yaml.SafeLoader else _limited(loader))(text)
    try:
        node = parser.get_single_node()
        if node is not None:
            _expanded_size(node, {})
        return node
    except _Refused as exc:
        raise YamlRefused(exc.what, _line(exc.mark), malformed=False) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlRefused(getattr(exc, "problem", None) or "not valid YAML", _line(mark)) from None
    finally:
        parser.dispose()


def load(text: str, loader: type = yaml.SafeLoader) -> Any:
    """Parse `text` with `loader` (a SafeLoader subclass) inside the limits."""
    node = compose(text, loader)
    if node is None:
        return None
    constructor = loader(text)
    try:
        return constructor.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlRefused(getattr(exc, "problem", None) or "not valid YAML", _line(mark)) from None
    except ValueError as exc:  # e.g. an integer past Python's 4300-digit conversion limit
        said = ("a number has more than 4300 digits" if "digits" in str(exc)
                else f"a value cannot be read ({str(exc).splitlines()[0]})")
        raise YamlRefused(said, None, malformed=False) from None
