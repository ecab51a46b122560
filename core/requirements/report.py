"""Findings as one table: where, what was checked, what was found, what is needed, what
to do. The CLI prints it and the app shows it; neither decides anything about it."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.domain.terminal_text import printable

FAIL, UNKNOWN, OK = "fail", "unknown", "ok"
COLUMNS = ("node", "check", "found", "needed", "what to do")


@dataclass(frozen=True)
class Finding:
    node: str  # a pool node's name, "local", or "all nodes" for account checks
    check: str  # "disk", "memory", "GPU memory", "dataset access", "W&B key", "facts"
    found: str
    needed: str
    todo: str = ""
    verdict: str = FAIL

    def cells(self) -> tuple[str, str, str, str, str]:
        """The row's text, control characters removed (node facts are not ours)."""
        return tuple(printable(c) for c in (self.node, self.check, self.found, self.needed,
                                            self.todo))  # type: ignore[return-value]


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == FAIL]

    @property
    def unknown(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == UNKNOWN]

    @property
    def passed(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == OK]

    @property
    def ok(self) -> bool:
        return not self.failures

    def shown(self) -> list[Finding]:
        """What the table shows: failures first, then what could not be checked."""
        return self.failures + self.unknown

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        return [f.cells() for f in self.shown()]

    def summary(self) -> str:
        if self.failures:
            return (f"{len(self.failures)} requirement{'s' if len(self.failures) != 1 else ''} "
                    f"not met, {len(self.passed)} met: nothing was submitted")
        if self.unknown:
            return f"{len(self.passed)} requirements met, {len(self.unknown)} not checked"
        return f"all {len(self.passed)} requirements met"

    def ignoring_briefly(self) -> str:
        """What --force would ignore, by check and node (the table has the numbers)."""
        return ", ".join(f"{f.check} on {f.node}" for f in self.failures)

    def ignoring(self) -> str:
        """For --force: what the user goes on without, in one line."""
        return "; ".join(f"{f.check} on {f.node} ({f.found}, need {f.needed})" for f in self.failures)


def gb(value: float) -> str:
    return f"{value:,.0f} GB" if value >= 10 else f"{value:.1f} GB"
