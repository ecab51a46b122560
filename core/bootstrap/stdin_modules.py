"""Running the shipped recipes' check on a node without writing anything there: a fixed program
(`python -c STUB`) reads one JSON document from stdin (the modules' source, argv, environment and
the store token) and imports the modules from it. The token is never on a command line, in a file
or in the node's log; the modules are read through the one bounded loader
(core.domain.source_files.read_shipped)."""

from __future__ import annotations

import json
import re

from core.domain.check_modules import module_sources
PYTHON_RE = re.compile(r"(/[A-Za-z0-9._+-]{1,64}){1,16}|python3")
ENV_NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

STUB = """\
import importlib.abc, importlib.util, json, os, sys
d = json.loads(sys.stdin.buffer.read())
M = d["modules"]
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in M:
            return importlib.util.spec_from_loader(name, self, is_package=name == "recipes")
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(M[module.__name__], "<geotrain " + module.__name__ + ">", "exec"), module.__dict__)
sys.meta_path.insert(0, Finder())
os.environ.update(d["env"])
cluster_check = importlib.import_module("recipes.cluster_check")  # on the node, from the modules sent
sys.exit(cluster_check.main(d["argv"], token=d["token"].encode() if d["token"] else None))
"""


def payload(argv: list[str], env: dict[str, str], token: bytes | None) -> str:
    """The stdin document for STUB."""
    bad = [k for k in env if not ENV_NAME_RE.fullmatch(k)]
    if bad:
        raise ValueError(f"environment name {bad[0]!r}")
    return json.dumps({"modules": module_sources(), "argv": [str(a) for a in argv],
                       "env": {k: str(v) for k, v in env.items()},
                       "token": token.decode() if token else None})
