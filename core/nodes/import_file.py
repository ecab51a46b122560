"""Read the servers to import from a YAML or CSV file; every error names its line.

YAML: a list of mappings (or `nodes:` holding one). CSV: a header row, then one server
per row. Fields: name, endpoint (HOST[:PORT]), username, ssh_key_path, datacenter,
jump, trust_host_key; only name, endpoint and username are required.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import yaml

from core.errors import InvalidInput
from core.schema.user_files import read_user_file
from core.nodes.pool import ImportRequest
from core.nodes.ssh import parse_endpoint

FIELDS = ("name", "endpoint", "username", "ssh_key_path", "datacenter", "jump", "trust_host_key")
REQUIRED = ("name", "endpoint", "username")
_HINT = f"each server needs {', '.join(REQUIRED)}; optional: {', '.join(FIELDS[3:])}"


class _LineLoader(yaml.SafeLoader):
    """Remembers the line each mapping starts on (under the key `__line__`)."""


def _mapping_with_line(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    value = loader.construct_mapping(node, deep=True)
    value["__line__"] = node.start_mark.line + 1
    return value


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def request_from_fields(row: dict, where: str) -> ImportRequest:
    """One server's fields (strings) -> ImportRequest; errors start with `where`."""
    unknown = sorted(k for k in row if k not in FIELDS)
    if unknown:
        raise InvalidInput(f"{where}: unknown field {unknown[0]!r}", _HINT)
    for key in REQUIRED:
        if not str(row.get(key) or "").strip():
            raise InvalidInput(f"{where}: missing {key}", _HINT)
    values = {k: (str(v).strip() if v is not None and str(v).strip() else None) for k, v in row.items()}
    try:
        user, host, port = parse_endpoint(values["endpoint"], values["username"])
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", exc.hint) from None
    return ImportRequest(name=values["name"], host=host, port=port, username=user or values["username"],
                         key_path=values.get("ssh_key_path"), jump=values.get("jump"),
                         datacenter=values.get("datacenter"),
                         trust_host_key=values.get("trust_host_key"), source=where)


def _from_yaml(text: str, source: str) -> list[ImportRequest]:
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source} line {mark.line + 1}" if mark else source
        raise InvalidInput(f"{where}: malformed YAML: {getattr(exc, 'problem', None) or exc}",
                           "fix the YAML syntax and try again") from None
    if isinstance(data, dict) and "nodes" in data:
        data = data["nodes"]
    if not isinstance(data, list):
        raise InvalidInput(f"{source}: expected a list of servers (or `nodes:` holding one)",
                           "write one `- name: …` entry per server")
    requests = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise InvalidInput(f"{source} entry {index + 1}: expected a mapping, found {item!r}", _HINT)
        line = item.pop("__line__")
        requests.append(request_from_fields(item, f"{source} line {line}"))
    return requests


def _from_csv(text: str, source: str) -> list[ImportRequest]:
    reader = csv.DictReader(io.StringIO(text), skipinitialspace=True)
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header or any(h not in FIELDS for h in header):
        bad = next((h for h in header if h not in FIELDS), "(empty)")
        raise InvalidInput(f"{source} line 1: unknown column {bad!r} in the header", _HINT)
    reader.fieldnames = header
    requests = []
    for row in reader:
        where = f"{source} line {reader.line_num}"
        if None in row:
            raise InvalidInput(f"{where}: more values than the {len(header)} columns of the header",
                               "quote values that contain commas")
        if not any((v or "").strip() for v in row.values()):
            continue
        requests.append(request_from_fields(row, where))
    return requests


def read_import_file(path: str) -> list[ImportRequest]:
    """Parse FILE (.csv, else YAML) into import requests; nothing is contacted yet."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInput(f"import file {path} does not exist", "give the path of a .yaml or .csv file")
    text = read_user_file(file, "import file", "give the path of a .yaml or .csv file")
    requests = _from_csv(text, file.name) if file.suffix.lower() == ".csv" else _from_yaml(text, file.name)
    if not requests:
        raise InvalidInput(f"{file.name}: no servers in the file", _HINT)
    return requests
