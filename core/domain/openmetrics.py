"""A workspace's figures as OpenMetrics text (https://openmetrics.io), for teams that already run
Prometheus: each worker's CPU and network-wait shares (GPU busy and memory where there is one),
and the run's last loss and bytes sent. Pure: figures in, text out."""

from __future__ import annotations

import math

# (name, type, help, figure key in a worker's utilization figures)
WORKER_GAUGES = (
    ("geotrain_worker_cpu_ratio", "share of the last logging interval the worker's process ran on CPU "
                                  "(all threads: 1 is one core)", "cpu"),
    ("geotrain_worker_network_wait_ratio", "share of the last logging interval the worker's training thread "
                                           "waited in collectives", "wait_ratio"),
    ("geotrain_worker_gpu_utilization_ratio", "GPU busy share over the last sample (NVML)", "gpu"),
    ("geotrain_worker_gpu_memory_bytes", "GPU memory allocated by the worker", "gpu_memory_bytes"),
)


def escape_label(value: str) -> str:
    """A label value as OpenMetrics quotes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{key}="{escape_label(str(value))}"' for key, value in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(int(value))


def render(workspace: str, utilization: dict[str, dict], metrics: list[dict]) -> str:
    """The exposition: one family per figure, each worker a sample; `# EOF` last."""
    lines: list[str] = []
    for name, help_text, key in WORKER_GAUGES:
        samples = [(worker, figures[key] / 100 if key == "gpu" else figures[key])
                   for worker, figures in sorted(utilization.items()) if key in figures]
        if not samples:
            continue
        lines += [f"# TYPE {name} gauge", f"# HELP {name} {help_text}"]
        lines += [f"{name}{_labels(workspace=workspace, worker=worker)} {_number(value)}" for worker, value in samples]
    last = _last(metrics, "loss")
    if last is not None:
        lines += ["# TYPE geotrain_loss gauge", "# HELP geotrain_loss training loss over the last logging interval",
                  f"geotrain_loss{_labels(workspace=workspace)} {_number(last['loss'])}"]
    last = _last(metrics, "bytes_sent")
    if last is not None:
        lines += ["# TYPE geotrain_bytes_sent counter",  # no UNIT line: the spec wants the name to end in _bytes
                  "# HELP geotrain_bytes_sent bytes worker 0 sent over the WAN since the run began",
                  f"geotrain_bytes_sent_total{_labels(workspace=workspace, worker='worker-0')} "
                  f"{_number(last['bytes_sent'])}"]
    return "\n".join(lines + ["# EOF"]) + "\n"


def _last(rows: list[dict], key: str) -> dict | None:
    """The newest row with a finite, non-negative-where-counted number under `key`."""
    for row in reversed(rows):
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            if key != "bytes_sent" or value >= 0:
                return row
    return None
