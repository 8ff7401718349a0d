"""The lease file a flow run holds while it runs (the sweep that reads them is tested end to end with a real kill
in tests/test_prefect_background.py)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
import uuid
from pathlib import Path

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.settings import PREFECT_HOME, temporary_settings
from prefect.states import Running

from flows.run_lease import crash_dead_runs, flow_run_lease
from pipeline.store.held_file import PENDING_GRACE_S

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


@flow(name="idflow-lease-test")
def _placeholder() -> None:
    """Only gives the flow runs below a flow; never called."""


def test_a_lease_left_unnamed_by_a_kill_is_swept_once_old_enough(prefect_api: str, tmp_path: Path) -> None:
    """A process killed between creating `.<id>.new` and renaming it: its flow run is marked Crashed by the next
    sweep once the file is older than a live run's could be; a young pending file is left alone (its run may be
    between creating and locking it)."""
    leases = tmp_path / "home" / "idflow-runs"
    leases.mkdir(parents=True)

    async def scenario() -> tuple[StateType, StateType]:
        async with get_client() as client:
            dead, young = [await client.create_flow_run(_placeholder, state=Running()) for _ in range(2)]
            old_file, young_file = leases / f".{dead.id}.new", leases / f".{young.id}.new"
            old_file.touch()
            young_file.touch()
            long_ago = time.time() - PENDING_GRACE_S - 60
            os.utime(old_file, (long_ago, long_ago))
            await crash_dead_runs(LOGGER)
            states = [(await client.read_flow_run(run.id)).state for run in (dead, young)]
            assert not old_file.exists() and young_file.exists()
            return states[0].type, states[1].type

    with temporary_settings(updates={PREFECT_HOME: tmp_path / "home"}):
        assert asyncio.run(scenario()) == (StateType.CRASHED, StateType.RUNNING)
