"""Hostile worker output reaching the local supervisor's run history (issue 38 finding 8).

A worker prints what it likes: a line that only looks like an event (`geotrain-event []`, a
deep `[[[`, a string step, a 5000-digit step) used to raise in RunHistory.worker_line, which
killed the supervisor (the workspace ended FAILED, no recovery) or the pool's pump (the worker
then blocked on a full pipe). Each is now log text only: the history keeps working, the
recovery it was tracking is recorded with whole-number steps, and phase.json stays valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.backends.local.run_history import RunHistory, read_history, read_jsonl, read_phase

HOSTILE_LINES = {
    "event a list": "geotrain-event []",
    "event deep": "geotrain-event " + "[" * 100_000,
    "event deep object": "geotrain-event " + '{"a":' * 100_000,
    "event a string": 'geotrain-event "resumed"',
    "event kind a number": 'geotrain-event {"kind": 5, "step": 3}',
    "resumed step a string": 'geotrain-event {"kind": "resumed", "step": "5"}',
    "resumed step a list": 'geotrain-event {"kind": "resumed", "step": [5]}',
    "resumed step true": 'geotrain-event {"kind": "resumed", "step": true}',
    "resumed step NaN": 'geotrain-event {"kind": "resumed", "step": NaN}',
    "resumed step 1e400": 'geotrain-event {"kind": "resumed", "step": 1e400}',
    "rejoined step a string": 'geotrain-event {"kind": "rejoined", "step": "5", "outer_step": "x"}',
    "rejoined step null": 'geotrain-event {"kind": "rejoined", "step": null}',
    "joined step an object": 'geotrain-event {"kind": "joined", "step": {"a": 1}}',
    "step of 5000 digits": "step " + "7" * 5000 + "/10 loss 1.0",
    "outer of 5000 digits": "step 9/20 outer " + "7" * 5000,
    "step in other digits": "step ٣/١٠ loss 1.0",
}


@pytest.mark.parametrize("scope", ["worker", "group"])
@pytest.mark.parametrize("name", list(HOSTILE_LINES))
def test_a_hostile_worker_line_is_log_text_and_the_recovery_is_still_recorded(tmp_path, name, scope):
    history = RunHistory(tmp_path, workers=2)
    history.starting()
    history.worker_line("worker-0", "step 8/20 loss 2.0")
    history.failed(["worker-0"], "worker-0 exited with code 1", 1, 3, scope)
    history.worker_line("worker-0", HOSTILE_LINES[name])  # raised before
    history.worker_line("worker-0", "step 9/20 loss 1.9")
    recovered = [r for r in read_history(tmp_path) if r["kind"] == "recovered"]
    assert len(recovered) == 1, read_history(tmp_path)
    record = recovered[0]
    assert record["step"] == 9 and isinstance(record["restarted_at_step"], int)
    assert isinstance(record["steps_lost"], int) and record["steps_lost"] >= 0
    assert read_phase(tmp_path) is not None
    json.dumps(read_history(tmp_path))  # every record still plain JSON


def test_a_well_formed_resume_still_counts_the_steps_lost(tmp_path):
    history = RunHistory(tmp_path, workers=1)
    history.worker_line("worker-0", "step 8/20 loss 2.0")
    history.failed(["worker-0"], "worker-0 exited with code 1", 1, 3, "group")
    history.worker_line("worker-0", 'geotrain-event {"kind": "resumed", "step": 6}')
    history.worker_line("worker-0", "step 7/20 loss 1.9")
    (record,) = [r for r in read_history(tmp_path) if r["kind"] == "recovered"]
    assert (record["restarted_at_step"], record["steps_lost"]) == (6, 2)


def test_jsonl_lines_that_are_not_objects_are_left_out(tmp_path):
    """history.jsonl and metrics.jsonl (which an export brings along) are read with read_jsonl."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(['{"step": 1, "loss": 2.0}', "[" * 100_000, "[]", "5", '"x"', "{broken",
                               '{"step": 2, "loss": 1.5}']) + "\n")
    assert read_jsonl(path) == [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]


WORKER = """
import os, sys
prefix = "" if "RANK" in os.environ else "[default0]:"  # torchrun's prefix where a launcher runs the group
for line in {lines!r}:
    print(prefix + line, flush=True)
for i in range(2000):  # 2 MB: far past a pipe's buffer, so a pump that stopped reading blocks the worker
    print(prefix + "x" * 1000)
print(prefix + "step 1/1 loss 1.0", flush=True)
"""


@pytest.mark.parametrize("mode", ["group", "elastic"])
def test_a_real_supervisor_outlives_hostile_lines(tmp_path, mode):
    """The supervisor process itself (not daemonized) with a worker that prints every hostile line
    above, then more than a pipe holds: it completes (before: FAILED, or the pool's worker hung)."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(lines=list(HOSTILE_LINES.values())))
    argv = [sys.executable, str(script)]
    launch = {"workspace_id": f"hostile-{mode}", "mode": mode, "workers": 1, "max_recoveries": 0,
              "standby": False, "env": {}, "secret_refs": {}, "secrets_path": str(tmp_path / "secrets.json"),
              "argv": argv, "worker_argv": argv}
    (run_dir / "launch.json").write_text(json.dumps(launch))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "core.backends.local.supervisor", str(run_dir)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, [p.read_text()[-500:] for p in (run_dir / "logs").iterdir()]
    assert (run_dir / "exit_code").read_text() == "0"
    log = (run_dir / "logs" / "worker-0.log").read_text()
    assert "geotrain-event []" in log and "step 1/1 loss 1.0" in log  # every line kept as text


def test_a_worker_line_without_end_costs_one_cut_line(tmp_path):
    """A worker that writes 40 MB without a newline: the supervisor's pump read whole lines
    (150 MiB of memory for 50 MiB, found by review) and `logs` re-split the growing tail;
    both now read bounded chunks and show one cut line."""
    import subprocess
    import sys

    from core.backends.local.backend import LocalBackend
    from core.backends.local.worker_group import pump_output
    from core.domain.line_splitter import CUT_MARK, MAX_LINE_CHARS

    run_dir = tmp_path / "gpt-neo-abcdef"
    (run_dir / "logs").mkdir(parents=True)
    writer = ("import sys\nfor _ in range(40): sys.stdout.write('x' * 1_000_000)\n"
              "sys.stdout.write('\\nafter\\n')\n")
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    pump_output("worker-0", proc, run_dir / "logs", RunHistory(run_dir, 1), [])
    assert proc.wait() == 0
    logged = (run_dir / "logs" / "worker-0.log").read_text().splitlines()
    assert logged == ["x" * MAX_LINE_CHARS + CUT_MARK, "after"]

    with open(run_dir / "logs" / "launcher.log", "w") as log:  # a log file read by `logs`
        log.write("y" * 8_000_000 + "\nlast\n")
    lines = [line for worker, line in LocalBackend(tmp_path)._read_new(run_dir, {}) if worker == "launcher"]
    assert lines == ["y" * MAX_LINE_CHARS + CUT_MARK, "last"]
