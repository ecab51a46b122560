"""Progress of a deploy, node by node: light, so the app can import it without SSH."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ProgressEvent:
    """What the app turns into a progress bar: node, step, 0..1, and a message."""

    node: str
    step: str
    progress: float
    message: str
    state: str = "running"  # running | done | failed | skipped
