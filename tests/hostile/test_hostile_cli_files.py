"""Hostile input corpus for the CLI and every file it reads: each case is answered by the real
`python -m core.cli` with exit 2 and exactly one line on stderr (no traceback), within a hang
guard, with the state directory unchanged and nothing executed (the canary stays absent).
The in-process pattern for friendlier bad input is tests/core/test_bad_input.py."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.test_bad_input import _deploy

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD_S = 60  # a hang guard, not a timing assertion
RUN = "$(touch {canary})"  # what an injected shell command would do
# "billion laughs": 9 levels of 9 aliases = 9**9 strings once expanded
# (https://en.wikipedia.org/wiki/Billion_laughs_attack)
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
DEEP_FLOW = "[" * 200_000
DEEP_BLOCK = "".join("  " * i + "k:\n" for i in range(1000))  # 1 MB: under the size limit
SELF_REF = "config: &c {loop: *c}\n"
PY_TAG = f"!!python/object/apply:os.system ['touch {{canary}}']\n"
BIG_INT = "seed: " + "9" * 5000 + "\n"
HUGE = "# " + "x" * (5 * 1024 * 1024) + "\n"
NOT_UTF8 = b"model: gpt-neo\nname: \xff\xfe\xfa\n"
SPEC = "cluster: local\nmodel: gpt-neo\nsize: tiny\npreset: medium\nsteps: 5\nconfig: {{}}\nworkers: {workers}\n"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: {clusters}\ncontexts: []\nusers: []\n"
LINK = '{{"src": "a", "dst": "b", "latency_ms": {lat}, "mbit_s": 100}}'


def _import_ssh(*extra):
    return ["nodes", "import-ssh", "--name", "n1", "--endpoint", "192.0.2.1", "--username", "u", *extra]


def _plan(*extra):
    return ["clusters", "plan", "--model", "gpt-neo", *extra]


# name -> (argv with {f} for the case's file, {canary} for the canary path; file content or None)
CASES: dict[str, tuple[list[str], str | bytes | None]] = {
    # numbers on the command line
    "workers past the machine": (_deploy("--workers", "100000"), None),
    "workers with 30 digits": (_deploy("--workers", "9" * 30), None),
    "steps past a billion": (_deploy("--steps", "1000000000000"), None),
    "connect timeout inf": (_import_ssh("--connect-timeout", "inf"), None),
    "connect timeout nan": (_import_ssh("--connect-timeout", "nan"), None),
    "connect timeout negative": (_import_ssh("--connect-timeout", "-1"), None),
    "connect timeout 1e400": (_import_ssh("--connect-timeout", "1e400"), None),
    "refresh timeout a year": (["nodes", "refresh", "--connect-timeout", "31536000"], None),
    "plan step time inf": (_plan("--step-time", "inf"), None),
    "plan target nan": (_plan("--target", "nan"), None),
    "plan target 500%": (_plan("--target", "500%"), None),
    "plan params negative": (_plan("--params", "-5"), None),
    "plan params 5000 digits": (_plan("--params", "9" * 5000), None),
    "plan workers zero": (_plan("--workers", "0"), None),
    # --set values are YAML
    "--set unclosed list": (_deploy("--set", "optim.lr=[1"), None),
    "--set 5000-digit seed": (_deploy("--set", "seed=" + "9" * 5000), None),
    "--set python tag": (_deploy("--set", "seed=!!python/object/apply:os.system ['touch {canary}']"), None),
    "--set alias to itself": (_deploy("--set", "seed=&a [*a]"), None),
    "--set deep nesting": (_deploy("--set", "seed=" + "[" * 5000), None),
    "--set injected key": (_deploy("--set", RUN + "=1"), None),
    "cluster name injection": (_deploy("--cluster", RUN), None),
    "model name injection": (_deploy("--model", "; touch {canary}"), None),
    # --config: a detailed config or a whole spec
    "config alias bomb": (_deploy("--config", "{f}"), BOMB),
    "config deep flow nesting": (_deploy("--config", "{f}"), DEEP_FLOW),
    "config deep block nesting": (_deploy("--config", "{f}"), DEEP_BLOCK),
    "config refers to itself": (_deploy("--config", "{f}"), SELF_REF),
    "config python tag": (_deploy("--config", "{f}"), PY_TAG),
    "config 5000-digit seed": (_deploy("--config", "{f}"), BIG_INT),
    "config over 4 MiB": (_deploy("--config", "{f}"), HUGE),
    "config not UTF-8": (_deploy("--config", "{f}"), NOT_UTF8),
    "config is a list": (_deploy("--config", "{f}"), "- a\n- b\n"),
    "config is /dev/zero": (_deploy("--config", "/dev/zero"), None),  # endless: the read is bounded
    "spec with 100000 workers": (_deploy("--config", "{f}"), SPEC.format(workers=100000)),
    "spec with workers as text": (_deploy("--config", "{f}"), SPEC.format(workers="'$(touch {canary})'")),
    "spec with a bomb inside": (_deploy("--config", "{f}"), SPEC.format(workers=2) + "image: " + "[" * 3000),
    # node import files
    "nodes yaml alias bomb": (["nodes", "import", "{f}.yaml"], BOMB),
    "nodes yaml deep": (["nodes", "import", "{f}.yaml"], DEEP_FLOW),
    "nodes yaml python tag": (["nodes", "import", "{f}.yaml"], PY_TAG),
    "nodes yaml 5000-digit port": (["nodes", "import", "{f}.yaml"],
                                   "- {name: a, endpoint: 'h:" + "9" * 5000 + "', username: u}\n"),
    "nodes yaml injected name": (["nodes", "import", "{f}.yaml"],
                                 "- {name: '" + RUN + "', endpoint: h, username: u}\n"),
    "nodes csv not UTF-8": (["nodes", "import", "{f}.csv"], b"name,endpoint,username\n\xff,h,u\n"),
    "nodes csv injected name": (["nodes", "import", "{f}.csv"], "name,endpoint,username\n" + RUN + ",h,u\n"),
    # ssh_config
    "ssh_config Port abc": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                            "Host a\n  HostName 192.0.2.1\n  User u\n  Port abc\n"),
    # a Match block runs nothing and does not apply (its User is not Host a's): "Host a has no User"
    "ssh_config Match exec": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                              'Match exec "touch {canary}"\n  User x\nHost a\n  HostName 192.0.2.1\n'),
    "ssh_config Match ex\"\"ec": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                                'Match ex""ec "touch {canary}"\n  User x\nHost a\n  HostName 192.0.2.1\n'),
    "ssh_config Match host exec": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                                   'Match host a exec "touch {canary}"\n  User x\nHost a\n  HostName 192.0.2.1\n'),
    "ssh_config bare Match exec": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                                   "Match exec\nHost a\n  HostName 192.0.2.1\n"),
    "ssh_config not UTF-8": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                             b"Host a\n  User \xff\n"),
    "ssh_config over 16 MiB": (["nodes", "import", "--from-ssh-config", "a", "--ssh-config", "{f}"],
                               "Host a\n  User u\n" + "#" * (16 * 1024 * 1024) + "\n"),
    # network matrices
    "matrix yaml alias bomb": (_plan("--matrix", "{f}.yaml"), BOMB),
    "matrix json deep": (_plan("--matrix", "{f}.json"), DEEP_FLOW),
    "matrix json NaN latency": (_plan("--matrix", "{f}.json"), "[" + LINK.format(lat="NaN") + "]"),
    "matrix json Infinity latency": (_plan("--matrix", "{f}.json"), "[" + LINK.format(lat="Infinity") + "]"),
    "matrix yaml 1e400 latency": (_plan("--matrix", "{f}.yaml"), "- {src: a, dst: b, latency_ms: 1.0e+400, mbit_s: 1}\n"),
    # kubeconfigs
    "kubeconfig alias bomb": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "{f}"], BOMB),
    "kubeconfig deep": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "{f}"], DEEP_FLOW),
    "kubeconfig python tag": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "{f}"], PY_TAG),
    "kubeconfig not UTF-8": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "{f}"], NOT_UTF8),
    "kubeconfig is a directory": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "{dir}"], None),
    "kubeconfig is /dev/zero": (["clusters", "add-kubernetes", "k1", "--kubeconfig", "/dev/zero"], None),
}


def _snapshot(home: Path) -> dict[str, str]:
    """Every file under the state directory by content hash (WAL side files and empty lock
    files aside: taking a lock is not a change of state)."""
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*"))
            if p.is_file() and not p.name.endswith(("-wal", "-shm", ".lock"))}


def _cli(argv: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GEOTRAIN_HOME": str(home), "HOME": str(cwd), "PYTHONPATH": str(ROOT)}
    env.pop("WANDB_API_KEY", None), env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "core.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, errors="replace", timeout=HANG_GUARD_S)


def _assert_one_line_error(proc: subprocess.CompletedProcess) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].strip(), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and lines[0].startswith("error: ")


@pytest.fixture
def state(tmp_path):
    """A state directory, created through the CLI itself."""
    home = tmp_path / "state"
    assert _cli(["clusters", "list", "--json"], home, tmp_path).returncode == 0
    return home


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_one_line_and_changes_nothing(name, state, tmp_path):
    argv, content = CASES[name]
    canary = tmp_path / "canary"
    file = tmp_path / "input"
    suffix = next((a.split("{f}")[1] for a in argv if "{f}" in a), "")
    if content is not None:
        filled = content if isinstance(content, bytes) else content.replace("{canary}", str(canary))
        Path(f"{file}{suffix}").write_bytes(filled if isinstance(filled, bytes) else filled.encode())
    argv = [a.replace("{f}", str(file)).replace("{canary}", str(canary)).replace("{dir}", str(tmp_path))
            for a in argv]
    before = _snapshot(state)
    proc = _cli(argv, state, tmp_path)
    _assert_one_line_error(proc)
    assert _snapshot(state) == before
    assert not canary.exists()


# --- the state files themselves: the database and secrets.json ----------------------------

def _db(home: Path):
    """A connection closed on exit (closing the last one checkpoints the WAL into the file)."""
    return contextlib.closing(sqlite3.connect(home / "state.sqlite3", isolation_level=None))


def _newer_schema(home: Path) -> None:
    with _db(home) as conn:
        conn.execute("PRAGMA user_version=999")


def _malformed_workspace(home: Path) -> None:
    with _db(home) as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at)"
                     " VALUES ('gpt-neo-000000', 'local', '{not json', 'FAILED', 0, 0)")


def _spec_not_fields(home: Path) -> None:
    with _db(home) as conn:
        conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at)"
                     " VALUES ('gpt-neo-000001', 'local', '[1, 2]', 'FAILED', 0, 0)")


def _node_facts_not_json(home: Path) -> None:
    with _db(home) as conn:
        conn.execute("UPDATE clusters SET config='{broken' WHERE name='local'")


def _secrets(content: str):
    def write(home: Path) -> None:
        path = home / "secrets.json"
        path.write_text(content)
        path.chmod(0o600)
    return write


STATE_CASES = {
    "database schema newer": (_newer_schema, ["workspaces", "list", "--json"], "schema version 999"),
    "workspace row not JSON": (_malformed_workspace, ["workspaces", "list", "--json"], "gpt-neo-000000"),
    "workspace row a list": (_spec_not_fields, ["workspaces", "show", "gpt-neo-000001"], "gpt-neo-000001"),
    "cluster config not JSON": (_node_facts_not_json, ["clusters", "list", "--json"], "malformed JSON"),
    "secrets.json a list": (_secrets('["hf_x"]'), _deploy("--hf-token", "hf_abc", "--steps", "1"), "secret store"),
    "secrets.json values not text": (_secrets('{"a": {"b": 1}}'), _deploy("--hf-token", "hf_abc", "--steps", "1"),
                                     "secret store"),
    "secrets.json deep": (_secrets("[" * 100_000), _deploy("--hf-token", "hf_abc", "--steps", "1"), "secret store"),
}


@pytest.mark.parametrize("name", list(STATE_CASES))
def test_hostile_state_files_are_one_line_and_unchanged(name, state, tmp_path):
    prepare, argv, said = STATE_CASES[name]
    prepare(state)
    before = _snapshot(state)
    proc = _cli(argv, state, tmp_path)
    _assert_one_line_error(proc)
    assert said in proc.stderr, proc.stderr
    assert _snapshot(state) == before


def test_case_count_meets_the_corpus_size():
    """The issue asks for a corpus; keep it from shrinking unnoticed."""
    assert len(CASES) + len(STATE_CASES) >= 40


def test_newer_schema_error_says_what_to_do(state, tmp_path):
    _newer_schema(state)
    err = _cli(["clusters", "list"], state, tmp_path).stderr
    assert "newer than this geotrain knows" in err and "use the newer geotrain" in err
