"""The shell flow of `workspaces deploy` on a terminal: offer the detailed config in
$EDITOR before submitting, and ask for the tokens not given (hidden, empty to skip).

`--yes`, `--dry-run`, `--json` or no terminal (scripts, CI, pipes) ask nothing: the command
then behaves exactly as it always did.
"""

from __future__ import annotations

import getpass
import os
import sys

from core.cli.prompts import _interactive

TOKEN_LABELS = (("hf", "Hugging Face token"), ("wandb", "W&B API key"))


def asks(args) -> bool:
    return not (args.yes or args.dry_run or args.json) and _interactive()


def wants_editor(args) -> bool:
    """True when the config should open in $EDITOR: --edit, or yes to the question."""
    if args.edit or not asks(args):
        return args.edit
    answer = input("Open the detailed config in your editor before submitting? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def ask_missing_tokens(args, tokens: dict[str, str | None]) -> dict[str, str | None]:
    """Hidden prompts for the tokens neither flags nor environment gave (--ask-tokens too)."""
    if not (args.ask_tokens or asks(args)):
        return tokens
    for name, label in TOKEN_LABELS:
        if not tokens.get(name):
            tokens[name] = getpass.getpass(f"{label} (hidden; empty to skip): ").strip() or None
    if not tokens.get("wandb") and asks(args):
        print("No W&B key: the run logs offline; upload it later with "
              "`geotrain workspaces sync ID`.", file=sys.stderr)
    return tokens


REGISTRY_PASSWORD_ENV = "GEOTRAIN_REGISTRY_PASSWORD"


def registry_token(args, image: str | None, cluster_kind: str) -> dict[str, str]:
    """{"registry": "USER:PASSWORD"} for --registry-user (the password from the environment or a
    hidden prompt, never argv), checked; {} without it."""
    from core.errors import InvalidInput
    from core.kubernetes.registry_auth import check_registry_auth

    if not args.registry_user:
        return {}
    if not image or cluster_kind == "local":
        raise InvalidInput("--registry-user is for a private --image on a Kubernetes cluster",
                           "give --image REGISTRY/NAME:TAG and a Kubernetes --cluster, or drop --registry-user")
    password = os.environ.get(REGISTRY_PASSWORD_ENV, "")
    if not password and (args.ask_tokens or asks(args)):
        password = getpass.getpass(f"Password of {args.registry_user} at the image's registry (hidden): ").strip()
    if not password:
        raise InvalidInput(f"no password for --registry-user {args.registry_user}",
                           f"set {REGISTRY_PASSWORD_ENV}, or run on a terminal to be asked")
    value = f"{args.registry_user}:{password}"
    if check_registry_auth(value)[0] != args.registry_user:  # 'bob:x' would split as user bob
        raise InvalidInput("--registry-user is not a plain user name (no ':'; not repeated here: it may hold a password)",
                           "give --registry-user USER and the password in GEOTRAIN_REGISTRY_PASSWORD")
    return {"registry": value}
