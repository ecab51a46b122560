"""Read the servers to import from a YAML or CSV file; every error names its line.

YAML: a list of mappings (or `nodes:` holding one). CSV: a header row, then one server
per row. Fields: name, endpoint (HOST[:PORT]), username, ssh_key_path, datacenter,
jump, trust_host_key; only name, endpoint and username are required.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from core.schema.yaml_loader import load_yaml

from core.errors import InvalidInput
from core.schema.field_errors import ranked
from core.schema.user_files import read_user_file
from core.nodes.pool import ImportRequest
from core.schema.endpoints import parse_endpoint



class ImportRow(BaseModel):
    """One server of an import file (a YAML mapping or a CSV row); values are text."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Name of the server in the pool."""
    endpoint: str
    """HOST[:PORT] (IPv6 in brackets), as you would reach it over SSH."""
    username: str
    """SSH user (root, or one with passwordless sudo)."""
    ssh_key_path: Optional[str] = None
    """Private key to log in with; null: your SSH agent and default keys."""
    datacenter: Optional[str] = None
    """Datacenter label; servers in one datacenter are planned together."""
    jump: Optional[str] = None
    """Jump host USER@HOST[:PORT] to reach the server through."""
    trust_host_key: Optional[str] = None
    """SHA256 fingerprint of the host key to trust without asking."""

    @model_validator(mode="before")
    @classmethod
    def _as_text(cls, row: Any) -> Any:
        """Every value is read as stripped text; an empty one counts as absent."""
        if not isinstance(row, dict):
            return row
        return {k: str(v).strip() for k, v in row.items() if v is not None and str(v).strip()}


FIELDS = tuple(ImportRow.model_fields)
REQUIRED = tuple(name for name, info in ImportRow.model_fields.items() if info.is_required())
_HINT = f"each server needs {', '.join(REQUIRED)}; optional: {', '.join(FIELDS[len(REQUIRED):])}"


class _LineLoader(yaml.SafeLoader):
    """Remembers the line each mapping starts on (under the key `__line__`)."""


def _mapping_with_line(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    value = loader.construct_mapping(node, deep=True)
    value["__line__"] = node.start_mark.line + 1
    return value


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_with_line)


def request_from_fields(row: dict, where: str) -> ImportRequest:
    """One server's fields (strings) -> ImportRequest; errors start with `where`."""
    try:
        fields = ImportRow.model_validate(row)
    except ValidationError as exc:
        error = ranked(exc)[0]
        key = error["loc"][0]
        problem = f"unknown field {key!r}" if error["type"] == "extra_forbidden" else f"missing {key}"
        raise InvalidInput(f"{where}: {problem}", _HINT) from None
    try:
        user, host, port = parse_endpoint(fields.endpoint, fields.username)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc.message}", exc.hint) from None
    return ImportRequest(name=fields.name, host=host, port=port, username=user or fields.username,
                         key_path=fields.ssh_key_path, jump=fields.jump, datacenter=fields.datacenter,
                         trust_host_key=fields.trust_host_key, source=where)


def _from_yaml(text: str, source: str) -> list[ImportRequest]:
    data = load_yaml(text, source, loader=_LineLoader)
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
