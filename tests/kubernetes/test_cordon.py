"""Cordon and uncordon (issue 43) through the real `kubernetes` client against the stand-in API server
(tests/kubernetes/fake_api_server.py): the PATCH the server receives is kubectl cordon's."""

import copy

import pytest

from core.errors import InvalidInput, NotFound
from core.kubernetes.cordon import set_cordon
from core.state.store import Store
from tests.kubernetes.conftest import run


@pytest.fixture
def away(fake, kubeconfig, capsys):
    fake.nodes = copy.deepcopy(fake.nodes)
    assert run(capsys, "clusters", "add-kubernetes", "away", "--kubeconfig", kubeconfig)[0] == 0
    return fake


def node(fake, name):
    return next(n for n in fake.nodes if n["metadata"]["name"] == name)


def test_cordon_and_uncordon_patch_spec_unschedulable(away, capsys):
    code, out, _ = run(capsys, "nodes", "cordon", "gpu-a", "--cluster", "away")
    assert code == 0 and "gpu-a on away is now cordoned" in out
    assert away.patches == [("gpu-a", "application/strategic-merge-patch+json", {"spec": {"unschedulable": True}})]
    assert node(away, "gpu-a")["spec"] == {"unschedulable": True}

    code, out, _ = run(capsys, "nodes", "cordon", "gpu-a", "--cluster", "away")  # again: nothing sent
    assert code == 0 and "was already cordoned" in out and len(away.patches) == 1

    code, out, _ = run(capsys, "nodes", "uncordon", "gpu-a", "--cluster", "away")
    assert code == 0 and "schedulable again" in out
    assert away.patches[-1] == ("gpu-a", "application/strategic-merge-patch+json", {"spec": {"unschedulable": None}})
    assert "unschedulable" not in node(away, "gpu-a")["spec"]


def test_refusals_are_one_line_and_change_nothing(away, capsys):
    with pytest.raises(NotFound, match="has no node 'gpu-z'"):
        set_cordon(Store(), "gpu-z", True, "away")
    with pytest.raises(InvalidInput, match="not a node name"):
        set_cordon(Store(), "gpu-a;reboot", True, "away")
    with pytest.raises(InvalidInput, match="no scheduler"):
        set_cordon(Store(), "local", True, "local")
    code, _, err = run(capsys, "nodes", "cordon", "gpu-a", "--cluster", "local")
    assert code != 0 and "no scheduler" in err and len(err.strip().splitlines()) <= 2
    assert away.patches == []

