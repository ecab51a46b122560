"""Who we log in as and whether sudo works without a password (needed to install)."""

from __future__ import annotations

COMMAND = ('id -un; if [ "$(id -u)" = 0 ]; then echo root; '
           'elif command -v sudo >/dev/null 2>&1; then '
           'if sudo -n true 2>/dev/null; then echo passwordless; else echo password-required; fi; '
           'else echo no-sudo; fi')


def parse(output: str) -> dict:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    user = lines[0] if lines else ""
    verdict = lines[-1] if len(lines) > 1 else "unknown"
    return {"user": user, "root": verdict == "root",
            "passwordless": verdict in ("root", "passwordless"), "sudo": verdict}
