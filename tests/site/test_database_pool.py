import pytest

from tests.site.test_checks import manage
from tideline_site.env import database_from_url

SQLITE_OPTIONS = {"timeout": 30}


def test_it_bounds_the_postgres_pool_at_the_configured_size():
    database = database_from_url(
        "postgres://tide@db.internal:5433/tideline?host=/run/pg",
        sqlite_options=SQLITE_OPTIONS,
        postgres_pool_size=5,
    )

    assert database["OPTIONS"] == {
        "host": "/run/pg",
        "pool": {"min_size": 1, "max_size": 5, "timeout": 30},
    }
    assert database["CONN_MAX_AGE"] == 0


def test_it_opens_a_connection_per_request_when_the_pool_size_is_zero():
    database = database_from_url(
        "postgres://tide@db.internal/tideline", sqlite_options=SQLITE_OPTIONS, postgres_pool_size=0
    )

    assert "pool" not in database["OPTIONS"]


def test_it_never_pools_sqlite():
    database = database_from_url(
        "sqlite:///tmp/t.sqlite3", sqlite_options=SQLITE_OPTIONS, postgres_pool_size=8
    )

    assert database["OPTIONS"] == SQLITE_OPTIONS


def test_it_refuses_a_sqlite_file_in_a_directory_that_does_not_exist(tmp_path):
    result = manage(
        "migrate",
        TIDELINE_DATA_DIR=str(tmp_path),
        TIDELINE_DATABASE_URL=f"sqlite:///{tmp_path / 'missing' / 'tideline.sqlite3'}",
    )

    assert result.returncode != 0
    assert f"the directory {tmp_path / 'missing'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("value", ["-1", "many", "500"])
def test_it_refuses_a_pool_size_that_is_not_a_small_count(value):
    result = manage("check", TIDELINE_POSTGRES_POOL_SIZE=value)

    assert result.returncode != 0
    assert "TIDELINE_POSTGRES_POOL_SIZE" in result.stderr
    assert "Traceback" not in result.stderr
