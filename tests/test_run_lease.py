"""The lease file a flow run holds while it runs (the sweep that reads them is tested end to end with a real kill
in tests/test_prefect_background.py)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import uuid
from pathlib import Path

import pytest
from prefect.settings import PREFECT_HOME, temporary_settings

from flows.run_lease import flow_run_lease

LOGGER = logging.getLogger("test-run-lease")


def _locked_by_someone(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_lease_is_locked_while_the_run_lives_and_gone_after(tmp_path: Path) -> None:
    run_id = uuid.uuid4()
    lease = tmp_path / "home" / "idflow-runs" / str(run_id)

    async def run() -> list[str]:
        async with flow_run_lease(run_id, LOGGER):
            assert _locked_by_someone(lease)
            return sorted(p.name for p in lease.parent.iterdir())

    with temporary_settings(updates={PREFECT_HOME: tmp_path / "home"}):
        names = asyncio.run(run())
    assert names == [str(run_id)]  # no temporary name left beside it
    assert not lease.exists()


def test_a_prefect_home_that_cannot_hold_leases_costs_a_warning_only(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the Prefect home should be")

    async def run() -> str:
        async with flow_run_lease(uuid.uuid4(), LOGGER):
            return "ran"

    with temporary_settings(updates={PREFECT_HOME: home}), caplog.at_level(logging.WARNING, LOGGER.name):
        assert asyncio.run(run()) == "ran"
    assert "stays Running" in caplog.text
