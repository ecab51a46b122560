"""A Kubernetes workspace's utilization (issue 43), mixed into KubernetesBackend: every rank emits a
`utilization` event per logging interval (recipes.telemetry.Utilization: CPU share, seconds waited
on the network, GPU busy % and memory where a GPU is); here they are read back from the tail of each
pod's log, checked as the local supervisor checks them (core.domain.run_events.utilization: any
output can imitate an event), and kept per rank as `worker-<rank>`, the local backend's names.

One read of the pods' logs serves both calls of a refresh (the app asks for the last figures and
the recent ones): it is kept for READ_EVERY_S."""

from __future__ import annotations

import time

from core.domain.run_events import UTILIZATION_KEPT, parse_event, utilization

READ_EVERY_S = 2.0
TAIL_LINES = 400  # a rank's event per interval among its progress lines: enough for the sparkline
TAIL_BYTES = 512 * 1024


def figures_by_worker(lines: list[str]) -> dict[str, list[dict]]:
    """worker-<rank> -> its checked figures from log lines, oldest first, at most UTILIZATION_KEPT."""
    found: dict[str, list[dict]] = {}
    for line in lines:
        event = parse_event(line)
        figures = utilization(event) if event is not None else None
        if figures is not None:
            kept = found.setdefault(f"worker-{figures['rank']}", [])
            kept.append(figures)
            del kept[:-UTILIZATION_KEPT]
    return found


class PodUtilization:
    """Needs the backend's _pods and _log_tail."""

    def _utilization_read(self, workspace_id: str) -> dict[str, list[dict]]:
        cache = self.__dict__.setdefault("_utilization_cache", {})
        at, found = cache.get(workspace_id, (0.0, None))
        if found is not None and time.monotonic() - at < READ_EVERY_S:
            return found
        found = {}
        for pod in self._pods(workspace_id):
            if not ((pod.get("status") or {}).get("phase") == "Running"):
                continue  # a pending pod has no log; an ended one's figures are not current
            lines = self._log_tail(pod["metadata"]["name"], tail_lines=TAIL_LINES, limit_bytes=TAIL_BYTES)
            for worker, figures in figures_by_worker(lines or []).items():
                found.setdefault(worker, []).extend(figures)
        cache[workspace_id] = (time.monotonic(), found)
        return found

    def utilization(self, workspace_id: str) -> dict[str, dict]:
        return {worker: kept[-1] for worker, kept in self._utilization_read(workspace_id).items() if kept}

    def utilization_history(self, workspace_id: str) -> dict[str, list[dict]]:
        return {worker: kept[-UTILIZATION_KEPT:] for worker, kept in self._utilization_read(workspace_id).items()}
