"""Hostile corpus of issue 38 ("Nothing on the network drives a workspace"): what a pod, a server
or a W&B address sends. Pod logs with terminal escapes, endless lines and tokens, an exec stream
larger than its cap (sparse files, or a pod that ignores its own size check), a node's facts with
escapes, and a W&B server that redirects the key check. Each is answered with the safe behaviour
or a one-line message; nothing reaches the terminal but text, nothing is held past its bound.
The Kubernetes API, its log stream and pod exec (a websocket) are tests/kubernetes' stand-in."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.cli import main
from core.domain.records import Node
from core.domain.terminal_text import printable
from core.kubernetes import pod_files
from core.kubernetes.pod_logs import CUT_MARK, MAX_LINE_CHARS, LineSplitter
from core.requirements.report import UNKNOWN
from core.requirements.wandb_key import check_wandb_key
from core.state.node_records import add_nodes
from core.state.store import Store
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import fake, geotrain_home, kubeconfig, run  # noqa: F401 - fixtures
from tests.kubernetes.test_export_from_pods import _core_api, _deploy, _tar

# name -> what a pod or a server writes; each would act on a terminal that printed it
ESCAPES = {
    "OSC 52 clipboard write": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "OSC 0 title, ST-terminated": "\x1b]0;owned\x1b\\",
    "RIS full reset": "\x1bc",
    "DCS request": "\x1bP$q\"p\x1b\\",
    "CSI with intermediates (DECSCUSR)": "\x1b[2 q",
    "CSI clear screen": "\x1b[2J\x1b[H",
    "8-bit CSI and OSC": "\x9b2J\x9d0;owned\x9c",
    "OSC cut short": "\x1b]0;owned",
    "nF charset switch": "\x1b(0",
    "bell, backspace, carriage return": "\x07\x08\rfake",
    "bidi override and line separator": "\u202e\u2028",
}
TOKEN = "wandb-export-token-1234567"  # the W&B key _deploy stores for its workspace


def _shows_only_text(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n" for c in text)


# terminal escapes (finding 4) ---------------------------------------------------------------

@pytest.mark.parametrize("name", list(ESCAPES))
def test_printable_keeps_the_words_and_drops_every_control(name):
    shown = printable(f"before {ESCAPES[name]} after\tend")
    assert _shows_only_text(shown) and "\n" not in shown, repr(shown)
    assert shown.startswith("before ") and shown.endswith(" after\tend")


def test_pod_logs_with_escapes_print_as_text(fake, kubeconfig, capsys):
    ws, master, _ = _deploy(fake, kubeconfig, capsys)
    fake.write_log(master, "".join(f"{name}: {seq} done\n" for name, seq in ESCAPES.items()).encode())
    code, out, err = run(capsys, "workspaces", "logs", ws.id)
    assert code == 0, err
    assert _shows_only_text(out), repr(out)
    assert all(f"[master-0] {name}: " in out for name in ESCAPES)
    assert out.count("\n") == len(ESCAPES)  # a carriage return or separator starts no line of its own


def test_node_facts_with_escapes_print_as_text(geotrain_home, capsys):
    hostile = "".join(ESCAPES.values())
    facts = {"system": {"os_name": f"Ubuntu{hostile}", "kernel": hostile, "arch": "x86_64"},
             "gpus": [{"index": 0, "name": f"A100{hostile}", "memory_mb": 1, "driver": hostile}],
             "cpu": {"model": hostile, "cores": 8}, "containerd": {"version": hostile}, "public_ip": hostile}
    add_nodes(Store(), [Node(name="gpu1", host="192.0.2.7", username="ubuntu", datacenter="dc1",
                             status="BLOCKED", blockers=[f"disk{hostile}"], facts=facts)])
    for argv in (["nodes", "list"], ["nodes", "show", "gpu1"]):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert _shows_only_text(out) and "A100" in out and "disk" in out, repr(out)


def test_an_error_carrying_a_servers_escapes_is_one_printable_line(geotrain_home, capsys, monkeypatch):
    from core.errors import BackendError

    def refuse(self, workspace_id, follow=False):
        raise BackendError(f"the API server said {ESCAPES['OSC 52 clipboard write']}no\nsecond line",
                           ESCAPES["RIS full reset"] + "try again")
    monkeypatch.setattr(WorkspaceService, "logs", refuse)
    assert main(["workspaces", "logs", "ws"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and _shows_only_text(err), repr(err)
    assert "said no second line" in err and "try again" in err


def test_the_apps_log_view_and_tables_show_escapes_as_text():
    from tui.formatting import literal
    from tui.widgets.log_view import clean

    for seq in ESCAPES.values():
        assert _shows_only_text(clean(f"a{seq}b\tc")) and "\t" not in clean(f"a{seq}b\tc")
        assert _shows_only_text(literal(f"a{seq}b").plain)


# the export's exec stream (finding 5) -------------------------------------------------------

def test_the_pods_size_check_counts_sparse_files_at_their_apparent_size(tmp_path):
    if subprocess.run(["du", "-sk", "--apparent-size", str(tmp_path)], capture_output=True).returncode:
        pytest.skip("this du has no --apparent-size (GNU coreutils, as in the upstream PyTorch images)")
    with open(tmp_path / "sparse.pt", "wb") as fh:
        fh.truncate(64 << 20)  # 64 MiB that `du` without --apparent-size counts as a few KB
    out = subprocess.run(pod_files.tar_command(str(tmp_path), 1 << 20), capture_output=True, timeout=60).stdout
    said = out.decode().split()
    assert said[:2] == [pod_files.SENTINEL, "toobig"] and int(said[2]) >= 65536, said


def _endless_base64(limit: int = 256 << 20):
    """What a pod that ignores its own size check sends: base64 lines, far past the cap."""
    line = base64.encodebytes(b"\0" * 57 * 1024)
    for _ in range(limit // len(line)):
        yield line


def test_an_exec_stream_past_the_cap_is_closed_as_it_arrives(fake, kubeconfig, capsys, tmp_path, monkeypatch):
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    monkeypatch.setattr(pod_files, "MAX_STREAM_BYTES", 1 << 20)
    fake.exec_output[master] = _endless_base64()
    fake.exec_output[worker] = _endless_base64()
    dest = tmp_path / "exported"
    code, out, err = run(capsys, "workspaces", "export", ws.id, str(dest))
    assert code == 0, err
    assert f"Checkpoints NOT exported: the checkpoints of pod {master} are larger than 2 GiB" in out, out
    assert not (dest / "checkpoints").exists()
    deadline = time.monotonic() + 30
    while master not in fake.exec_sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake.exec_sent[master] < 32 << 20  # the stand-in stopped at the client's closing, not at 256 MiB


def test_a_large_exec_stream_is_decoded_to_disk_as_it_arrives(fake, tmp_path):
    """64 MiB of base64 through the exec websocket, in frames that cut its lines anywhere: the
    client holds a few MiB of it at a time (it held the stream, joined, and decoded: ~5 copies)."""
    weights = bytes(range(256)) * (48 << 12)  # 48 MiB
    text = base64.encodebytes(_tar([("./step_00000010/rank_0.pt", None, weights)]))
    text += f"{pod_files.SENTINEL} 0\n".encode()
    assert len(text) > 64 << 20
    fake.exec_output["p"] = [text[i:i + 65000] for i in range(0, len(text), 65000)]
    del text
    core_api = _core_api(fake)  # its making is not the stream's (some MiB of the client's own)
    tracemalloc.start()
    try:
        with pod_files.read_checkpoint_archive(core_api, "p", "default", "trainer", tmp_path) as archive:
            peak = tracemalloc.get_traced_memory()[1]
            written, skipped = pod_files.unpack_checkpoints(archive, tmp_path / "out")
            peak = max(peak, tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / (1 << 20):.1f} MiB"
    assert (written, skipped) == (["step_00000010/rank_0.pt"], [])
    assert (tmp_path / "out" / "step_00000010" / "rank_0.pt").read_bytes() == weights
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the spool file was never named


def test_the_exec_streams_decoder_holds_a_bounded_tail_whatever_the_lines():
    """Newlines without end, or a line without one: what waits to be decoded stays small."""
    import io
    for first, chunk in [(b"QUJD\n", b"\n" * (1 << 20)), (b"", b"QUJD" * (1 << 18)), (b"x", b"\n" * (1 << 20))]:
        spool = pod_files._Base64Spool(io.BytesIO())
        spool.feed(first)
        for _ in range(32):
            spool.feed(chunk)
            assert len(spool.held) <= pod_files.MAX_STATUS_LINE + 1
    assert spool.last_line() == b"x" and not spool.garbled  # the last line, maybe the status line


# pod log lines (finding 7) ------------------------------------------------------------------

def test_an_endless_line_is_cut_at_its_bound_and_the_next_line_is_whole():
    splitter, lines = LineSplitter(), []
    for _ in range(2048):  # 8 MB without a newline, in the API's 4 KiB reads
        lines += splitter.feed(b"x" * 4096)
        assert len(lines) <= 1 and sum(map(len, splitter._parts)) <= MAX_LINE_CHARS
    lines += splitter.feed(b"\nafter\r\n") + splitter.flush()
    assert lines == ["x" * MAX_LINE_CHARS + CUT_MARK, "after"]


def test_an_endless_pod_line_through_the_api_prints_bounded(fake, kubeconfig, capsys):
    ws, master, _ = _deploy(fake, kubeconfig, capsys)
    fake.write_log(master, b"y" * (8 << 20) + b"\nafter\n")
    code, out, err = run(capsys, "workspaces", "logs", ws.id)
    assert code == 0, err
    assert out.splitlines() == ["[master-0] " + "y" * MAX_LINE_CHARS + CUT_MARK, "[master-0] after"]


# tokens (finding 10) ------------------------------------------------------------------------

def test_a_token_in_a_pods_log_is_redacted_in_logs_the_app_and_the_export(fake, kubeconfig, capsys, tmp_path):
    ws, master, _ = _deploy(fake, kubeconfig, capsys)
    fake.write_log(master, f"wandb: key {TOKEN} loaded\nAuthorization: Bearer abc.def.ghi\n".encode())
    code, out, err = run(capsys, "workspaces", "logs", ws.id)
    assert code == 0, err
    assert out.splitlines() == ["[master-0] wandb: key *** loaded", "[master-0] Authorization: Bearer ***"]
    assert [line for _, line in WorkspaceService().logs(ws.id)][0] == "wandb: key *** loaded"  # the app's feed
    code, _, err = run(capsys, "workspaces", "export", ws.id, str(tmp_path / "exported"))
    assert code == 0, err
    exported = (tmp_path / "exported" / "logs" / "master-0.log").read_text()
    assert TOKEN not in exported and "wandb: key *** loaded" in exported


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        self.seen.append((self.command, self.headers.get("Authorization")))
        body = json.dumps({"data": {"viewer": {"id": "1", "username": "mallory"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


def _serve(handler) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_the_wandb_key_check_follows_no_redirect(code, monkeypatch):
    recorder = type("Recorder", (_Recorder,), {"seen": []})
    other, other_url = _serve(recorder)

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(code)
            self.send_header("Location", f"{other_url}/graphql")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server, url = _serve(Redirect)
    try:
        monkeypatch.setenv("WANDB_BASE_URL", url)
        finding = check_wandb_key("a1b2c3d4e5" * 4)
    finally:
        server.shutdown()
        other.shutdown()
    assert recorder.seen == []  # the key went nowhere else
    assert finding.verdict == UNKNOWN and f"{url} redirected the check (HTTP {code})" in finding.found


def test_token_flags_say_that_argv_is_visible_and_what_to_prefer(capsys):
    assert main(["workspaces", "deploy", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag, env in (("--wandb-token", "WANDB_API_KEY"), ("--hf-token", "HF_TOKEN")):
        said = text[text.index(flag):]
        assert "`ps`" in said[:200] and env in said[:200] and "--ask-tokens" in said[:200], said[:200]
