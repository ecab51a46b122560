"""The kubeconfig step says when this machine cannot reach the new cluster's API (issue 41,
item 11: TCP 6443 from the user's machine was never checked). Real sockets on loopback."""

from __future__ import annotations

import socket

from core.bootstrap.kubeconfig import api_unreachable


def test_a_listening_api_port_is_reachable_and_a_closed_one_says_why():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert api_unreachable(f"https://127.0.0.1:{port}") == ""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert api_unreachable(f"https://127.0.0.1:{port}", timeout=2) == "Connection refused"
    assert api_unreachable("https://[::1]:notaport") != ""
