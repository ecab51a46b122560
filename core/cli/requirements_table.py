"""The requirements table before `workspaces deploy` submits: printed to stderr (stdout
stays the command's result, e.g. --json), refusing unless --force."""

from __future__ import annotations

import sys

from core.cli.output import table
from core.domain.records import WorkspaceSpec
from core.requirements.check import check_before_deploy
from core.requirements.report import COLUMNS
from core.state.store import Store


def requirements_met(store: Store, spec: WorkspaceSpec, tokens: dict[str, str | None], force: bool) -> bool:
    """True when deploying may go on: everything met, or --force given."""
    report = check_before_deploy(store, spec, tokens)
    if report.shown():
        table(COLUMNS, report.rows(), out=sys.stderr)
    if report.ok:
        if report.unknown:
            print(f"{report.summary()}; deploying.", file=sys.stderr)
        return True
    if force:
        print(f"--force: deploying anyway, ignoring {report.ignoring()}.", file=sys.stderr)
        return True
    print(f"{report.summary()}. Fix what the table says, or pass --force to deploy anyway.",
          file=sys.stderr)
    return False
