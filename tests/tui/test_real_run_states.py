"""The app's fixed states come from the recorded real run (tests/tui/fixtures/real_run):
its files, rewritten only where a picture would otherwise vary (id, run dir, times), and
the starting workspaces' states as the local supervisor's own RunHistory derives them."""

import json

from tests.tui import states


def test_fixture_is_a_small_completed_real_run():
    meta = states.recorded()
    assert meta["status"] == "COMPLETED" and "workspaces deploy" in meta["command"]
    assert sum(f.stat().st_size for f in states.REAL_RUN.rglob("*") if f.is_file()) < 200_000
    events = [line for w in (0, 1) for line in states.worker_lines(w) if line.startswith("geotrain-event ")]
    assert {json.loads(line[15:])["kind"] for line in events} >= {"data", "rendezvous", "joined"}
    rows = states.metrics_rows()
    assert rows[-1]["step"] == 200 and all(r["bytes_sent"] == 0 for r in rows if r["step"] < 32)


def test_seeded_files_name_no_recording_paths_and_run_on_the_frozen_clock(seeded):
    service, home = seeded
    meta = states.recorded()
    run_dir = home / "workspaces" / states.COMPLETED_ID
    texts = {p.name: p.read_text() for p in run_dir.rglob("*") if p.is_file()}
    for name, text in texts.items():
        assert meta["home"] not in text and meta["workspace_id"] not in text, name
    times = [json.loads(line)["time"] for line in texts["metrics.jsonl"].splitlines()]
    assert states.NOW - 7200 < times[0] < times[-1] < states.NOW
    assert f"{states.SHOWN_HOME}/workspaces/{states.COMPLETED_ID}/out/wandb/" in texts["worker-0.log"]


def test_starting_workspaces_report_their_phase_through_the_backend(seeded):
    service, home = seeded
    procs = states.seed_starting(home, service.store)
    try:
        preparing = service.status(states.PREPARING_ID)
        waiting = service.status(states.RENDEZVOUS_ID)
    finally:
        states.stop(procs)
    assert preparing.status == "PREPARING_DATA" and "worker-1: preparing markov" in preparing.reason
    # worker-1 joined while worker-0 still said "data ready": the group waits for worker-0.
    assert (waiting.status, waiting.reason) == ("RENDEZVOUS", "1 of 2 present, waiting for worker-0 "
                                                              "(data ready: markov in 0.011s)")
    history = [json.loads(line) for line in
               (home / "workspaces" / states.RENDEZVOUS_ID / "history.jsonl").read_text().splitlines()]
    assert [r["status"] for r in history] == ["PREPARING_DATA", "RENDEZVOUS"]
    assert all(r["at"] <= states.NOW for r in history)
