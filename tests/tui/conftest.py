import pytest

from tests.core.conftest import geotrain_home  # noqa: F401  (autouse: a temp GEOTRAIN_HOME)
from tests.tui import states
from tui.app import make_app


@pytest.fixture
def seeded(geotrain_home):  # noqa: F811
    """(service, home) with the fixed state of tests/tui/states.py."""
    service, procs = states.seed(geotrain_home)
    yield service, geotrain_home
    states.stop(procs)


@pytest.fixture
def app(seeded):
    return make_app(seeded[0], **states.app_options())
