from tests.core.conftest import geotrain_home  # noqa: F401  (autouse fixture: a temp GEOTRAIN_HOME)
