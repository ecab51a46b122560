"""The recipes' event lines read as one short line each, and give each worker's phase.

Every event kind the recipes emit (found by reading recipes/ for `emit("kind"`) must have a
sample here with its own wording: a new kind without one fails the first test."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.domain import run_events
from core.domain.run_events import WorkerPhase, combine

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
EMIT = re.compile(r'emit\(\s*"(\w+)"(?:\s+if\s[^,]*?\selse\s"(\w+)")?')

SAMPLES = {
    "data": [({"stage": "start", "source": "c4", "unit": "tokens", "total": None, "rank": 0},
              "preparing data: c4: starting"),
             ({"stage": "progress", "source": "c4", "unit": "tokens", "done": 12000, "total": 40000},
              "preparing data: c4: 12,000 of 40,000 tokens (30%)"),
             ({"stage": "done", "source": "c4", "unit": "tokens", "done": 40000, "seconds": 3.2},
              "data ready: c4: 40,000 tokens in 3.2s"),
             ({"stage": "done", "source": "c4", "unit": "tokens", "done": 40000, "cached": True,
               "seconds": 0.01}, "data ready: c4: 40,000 tokens from the cache in 0.01s"),
             ({"stage": "done", "source": "markov", "unit": "items", "cached": False, "seconds": 0.0},
              "data ready: markov in 0.0s")],
    "rendezvous": [({"stage": "waiting", "rank": 0, "world": 3}, "waiting for peers: rank 0 of 3"),
                   ({"stage": "waiting", "rank": 0, "world": 3, "missing": [1, 2]},
                    "waiting for peers: rank 0 of 3, missing rank 1, 2"),
                   ({"stage": "waiting", "missing": ["master"], "endpoint": "gt-ws-master-0.gt-ws:29400"},
                    "waiting for peers, missing master (at gt-ws-master-0.gt-ws:29400)"),
                   ({"stage": "joined", "rank": 1, "world": 3, "seconds": 0.4},
                    "rendezvous done: rank 1 of 3 in 0.4s")],
    "joined": [({"rank": 2, "reason": "start", "step": 0, "outer_step": 0, "source": 0, "members": [0, 1, 2]},
                "joined: rank 2 at step 0 (outer step 0), state from rank 0")],
    "rejoined": [({"rank": 1, "reason": "late for an outer step", "step": 64, "outer_step": 2, "source": 0},
                  "rejoined: rank 1 at step 64 (outer step 2), state from rank 0 (late for an outer step)")],
    "resumed": [({"rank": 1, "step": 40}, "recovered from step 40: rank 1 loaded its newest checkpoint")],
    "outer_step": [({"rank": 0, "step": 3, "members": [0, 2], "world": 3},
                    "outer step 3 averaged over 2 of 3 (ranks 0, 2)")],
    "utilization": [({"rank": 1, "step": 20, "wall_s": 2.0, "cpu": 0.9, "wait_s": 0.5},
                     "utilization: rank 1 CPU 90%, network wait 25%"),
                    ({"rank": 0, "step": 20, "wall_s": 1.0, "cpu": 1.5, "wait_s": 0.0, "gpu": 87.0,
                      "gpu_memory_bytes": 1 << 30}, "utilization: rank 0 CPU 150%, network wait 0%, GPU 87%")],
}


def emitted_kinds() -> set[str]:
    kinds = set()
    for path in RECIPES.rglob("*.py"):
        for match in EMIT.finditer(path.read_text()):
            kinds.update(k for k in match.groups() if k)
    return kinds


def line(kind: str, **detail) -> str:
    return run_events.EVENT_PREFIX + json.dumps({"kind": kind, "at": 1.0, **detail})


def test_every_kind_the_recipes_emit_has_its_own_wording():
    kinds = emitted_kinds()
    assert {"data", "rendezvous", "joined", "rejoined", "resumed", "outer_step"} <= kinds
    assert kinds == set(SAMPLES), "add a sample (and wording in core.domain.run_events) for a new kind"
    for kind, samples in SAMPLES.items():
        for detail, expected in samples:
            assert run_events.readable(line(kind, **detail)) == expected


@pytest.mark.parametrize("text", [
    "geotrain-event {\"kind\": \"joined\", ",  # cut short
    "geotrain-event [1, 2]",  # not an object
    "geotrain-event {\"rank\": 1}",  # no kind
    "geotrain-event {\"kind\": 7}",
    "somebody said geotrain-event {\"kind\": \"joined\"}",  # not at the start of the line
    "geotrain-event " + "[" * 5000,  # too deep / too long to be ours
    "[rank 0] step 10/20 loss 3.14",
])
def test_lines_that_are_not_well_formed_events_stay_as_they_are(text):
    assert run_events.readable(text) is None


def test_prefixed_events_and_unknown_kinds_still_read():
    assert run_events.readable("[default1]:" + line("resumed", rank=1, step=8)) == \
        "recovered from step 8: rank 1 loaded its newest checkpoint"
    assert run_events.readable(line("checkpoint_uploaded", step=100, repo="[bold]x[/]")) == \
        "checkpoint_uploaded: step 100, repo [bold]x[/]"  # plain text: the views never parse markup
    assert run_events.readable(line("resumed", rank="1\n\x1b[31mfake line", step=2)) == \
        "recovered from step 2: rank 1 fake line loaded its newest checkpoint"  # one line, no escapes


def test_a_worker_goes_through_data_rendezvous_running_and_ignores_late_reports():
    worker = WorkerPhase()
    assert worker.status == "PENDING"
    assert worker.feed(line("data", stage="start", source="c4", unit="tokens"))
    assert (worker.status, worker.detail) == ("PREPARING_DATA", "preparing c4: starting")
    assert worker.feed(line("data", stage="done", source="c4", unit="tokens", done=10, seconds=1))
    assert worker.detail == "data ready: c4: 10 tokens in 1s"
    assert worker.feed(line("rendezvous", stage="waiting", rank=0, world=2))
    assert (worker.status, worker.detail) == ("RENDEZVOUS", "waiting for peers")
    assert not worker.feed("[rank 0] gpt-neo/tiny 132,480 params")
    assert worker.feed("[rank 0] step 5/20 loss 5.3")
    assert worker.status == "RUNNING" and worker.step == 5
    assert not worker.feed(line("rendezvous", stage="waiting", rank=0, world=2))  # a rejoin while training
    assert worker.status == "RUNNING"
    odd = WorkerPhase()
    odd.feed(line("data", stage="start", source="c4\nstep 9/9"))
    assert odd.detail == "preparing c4 step 9/9: starting" and odd.status == "PREPARING_DATA"
    pod = WorkerPhase()  # a pod's wait for its master, before torchrun starts
    assert pod.feed(line("rendezvous", stage="waiting", missing=["master"], endpoint="m:29400"))
    assert (pod.status, pod.detail) == ("RENDEZVOUS", "waiting for master")


def test_the_workspace_state_names_who_holds_it_up():
    data = ("PREPARING_DATA", "preparing c4: 30%")
    assert combine({"worker-0": data}, ["worker-0", "worker-1"]) == ("PREPARING_DATA", "worker-0: preparing c4: 30%")
    waiting = ("RENDEZVOUS", "waiting for peers")
    assert combine({"worker-0": waiting, "worker-2": waiting}, ["worker-0", "worker-1", "worker-2"]) == \
        ("RENDEZVOUS", "2 of 3 present, waiting for worker-1")
    assert combine({"worker-1": ("PULLING", "pulling img on gpu-a"), "worker-0": waiting}, ["worker-0", "worker-1"]) \
        == ("PULLING", "worker-1: pulling img on gpu-a")
    running = ("RUNNING", "")
    assert combine({"worker-0": running, "worker-10": running, "worker-2": waiting},
                   ["worker-0", "worker-2", "worker-10"]) == ("RUNNING", "2 of 3 training; not yet: worker-2")
    assert combine({"worker-0": running, "worker-1": running}, ["worker-0", "worker-1"]) == ("RUNNING", "")
    assert combine({}, ["worker-0"]) == ("PENDING", "")


def test_a_failed_worker_is_named_as_failed_never_as_not_yet():
    oom = ("FAILED", "OOMKilled, exit code 137")
    running, waiting = ("RUNNING", ""), ("RENDEZVOUS", "waiting for peers")
    expected = ["worker-0", "worker-1", "worker-2"]
    assert combine({"worker-0": running, "worker-1": oom, "worker-2": running}, expected) == \
        ("RUNNING", "2 of 3 training; failed: worker-1 (OOMKilled, exit code 137)")
    assert combine({"worker-0": running, "worker-1": oom}, expected) == \
        ("RUNNING", "1 of 3 training; not yet: worker-2; failed: worker-1 (OOMKilled, exit code 137)")
    assert combine({"worker-0": waiting, "worker-1": oom}, expected) == \
        ("RENDEZVOUS", "1 of 3 present, waiting for worker-2; failed: worker-1 (OOMKilled, exit code 137)")
    assert combine({"worker-0": waiting, "worker-2": waiting, "worker-1": ("FAILED", "")}, expected) == \
        ("RENDEZVOUS", "2 of 3 present; failed: worker-1")
    assert combine({"worker-1": ("PULLING", "pulling img"), "worker-0": oom}, ["worker-0", "worker-1"]) == \
        ("PULLING", "worker-1: pulling img; failed: worker-0 (OOMKilled, exit code 137)")
    assert combine({"worker-1": oom}, ["worker-0", "worker-1"]) == \
        ("PENDING", "failed: worker-1 (OOMKilled, exit code 137)")
    data = ("PREPARING_DATA", "preparing c4: 30%")
    assert combine({"worker-0": data, "worker-1": oom}, ["worker-0", "worker-1"]) == \
        ("PREPARING_DATA", "worker-0: preparing c4: 30%; failed: worker-1 (OOMKilled, exit code 137)")
    # an evicted 64-worker job: three named, the rest counted, the line stays short
    many = {f"worker-{i}": ("FAILED", "Evicted: " + "x" * 290) for i in range(64)}
    status, reason = combine(many, list(many))
    assert status == "PENDING" and reason.endswith(" and 61 more") and reason.count("Evicted") == 3
    assert len(reason) < 1000


def test_a_late_worker_preparing_its_data_does_not_take_the_workspace_back():
    """Seen under load with elastic (local) workers, which prepare their data before they join:
    worker-1 started after worker-0 had joined; the workspace went RENDEZVOUS -> PREPARING_DATA ->
    RENDEZVOUS. It now stays in RENDEZVOUS and names what the late worker is doing."""
    expected = ["worker-0", "worker-1"]
    w0, w1 = WorkerPhase(), WorkerPhase()
    seen = []

    def after(worker: WorkerPhase, text: str) -> None:
        worker.feed(text)
        seen.append(combine({name: w for name, w in (("worker-0", w0), ("worker-1", w1)) if w.status != "PENDING"},
                            expected))

    data = dict(source="c4", unit="tokens")
    after(w0, line("data", stage="progress", done=30, total=100, **data, rank=0))
    after(w0, line("data", stage="done", done=100, seconds=1.5, **data, rank=0))
    after(w0, line("rendezvous", stage="waiting", rank=0, world=2))
    after(w1, line("data", stage="progress", done=30, total=100, **data, rank=1))
    after(w1, line("data", stage="done", done=100, seconds=1.5, **data, rank=1))
    after(w1, line("rendezvous", stage="waiting", rank=1, world=2))
    after(w0, "[rank 0] step 5/20 loss 5.3")
    assert [status for status, _ in seen] == ["PREPARING_DATA"] * 2 + ["RENDEZVOUS"] * 4 + ["RUNNING"]
    assert seen[3] == ("RENDEZVOUS", "1 of 2 present, waiting for worker-1 (preparing c4: 30 of 100 tokens (30%))")
    assert seen[-1] == ("RUNNING", "1 of 2 training; not yet: worker-1")


def test_workers_that_join_before_their_data_leave_preparing_data_showing():
    """Under torchrun (Kubernetes pods) workers join first and prepare data after; a pod with no
    output yet reads RENDEZVOUS. Their data preparation still shows as PREPARING_DATA."""
    joined, data = ("RENDEZVOUS", "joined the group"), ("PREPARING_DATA", "preparing c4: 3%")
    assert combine({"master-0": data, "worker-0": joined}, ["master-0", "worker-0"]) == \
        ("PREPARING_DATA", "master-0: preparing c4: 3%")
    # once one trains, a replacement pod pulling its image or preparing data is named, not shown instead
    running, pulling = ("RUNNING", ""), ("PULLING", "pulling img on gpu-b")
    assert combine({"master-0": running, "worker-0": pulling}, ["master-0", "worker-0"]) == \
        ("RUNNING", "1 of 2 training; not yet: worker-0 (pulling img on gpu-b)")
    assert combine({"master-0": running, "worker-0": data}, ["master-0", "worker-0"]) == \
        ("RUNNING", "1 of 2 training; not yet: worker-0 (preparing c4: 3%)")


HOSTILE = [
    'geotrain-event {"kind": "data", "done": Infinity, "total": 1}',
    'geotrain-event {"kind": "data", "done": -Infinity, "total": 1}',
    'geotrain-event {"kind": "data", "done": NaN, "total": 1}',
    'geotrain-event {"kind": "data", "done": 1e308, "total": 1e-308}',  # the quotient overflows
    'geotrain-event {"kind": "data", "done": %d, "total": 1}' % 10 ** 300,
    'geotrain-event {"kind": "data", "done": 1, "total": %d}' % 10 ** 20,
    'geotrain-event {"kind": "data", "done": -5, "total": 10}',
    'geotrain-event {"kind": "joined", "rank": -1, "step": 3}',
    'geotrain-event {"kind": "data", "done": 1, "total": 2, "x": ' + "[" * 1500 + "]" * 1500 + "}",
    "[rank 0] geotrain-event " + '{"kind": "data", "done": 1, "pad": "' + "a" * 10000 + '"}',
    "geotrain-event " + "9" * 5000,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_hostile_event_line_is_shown_raw_and_never_raises(text):
    """A worker can print anything: a line with a number that is not finite, out of range or
    negative, nested too deep or too long is not an event, and leaves the phase as it was."""
    assert run_events.readable(text) is None
    phase = WorkerPhase()
    assert phase.feed(text) is False
    assert (phase.status, phase.detail) == ("PENDING", "")


def test_wrong_types_in_an_event_still_give_one_line_without_raising():
    text = line("data", done={"a": 1}, total="x", source=[1], unit=None, seconds="soon")
    assert "\n" not in run_events.readable(text)
    phase = WorkerPhase()
    phase.feed(text)
    assert phase.status == "PREPARING_DATA"


def test_a_line_the_wording_cannot_handle_is_shown_raw_and_keeps_the_phase(monkeypatch):
    def broken(event):
        raise OverflowError("the wording broke")
    monkeypatch.setattr(run_events, "data_detail", broken)
    text = line("data", stage="progress", done=1, total=2)
    assert run_events.readable(text) is None
    phase = WorkerPhase(status="RENDEZVOUS", detail="waiting for peers")
    assert phase.feed(text) is False
    assert (phase.status, phase.detail) == ("RENDEZVOUS", "waiting for peers")
