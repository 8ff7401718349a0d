"""Flow runs whose process died unseen are marked Crashed by the next run on the machine.

Prefect marks a flow run Crashed when its own process sees the end coming (an exception, SIGTERM, Ctrl-C), and a
deployment's runner does when its child process exits. An `idflow run` killed with SIGKILL, by the OOM killer or
a power cut has nobody left to say so: its flow run stays Running in the UI for good (Prefect's own zombie
detection needs deployment heartbeats and an automation). So while a flow run of idflow's runs, its process holds
an `flock` on a file named after it, `PREFECT_HOME/idflow-runs/<flow run id>`. The kernel drops the lock however
the process ends, and a run that ends normally removes the file before it lets go; so a file whose lock can be
taken, and that is still there once taken, names a run that died. The next flow run to start with the same
Prefect home marks that flow run Crashed (if the API it talks to still has it Running or Pending) and removes
the file. A process killed in the microseconds between creating its file (`.<id>.new`) and naming it leaves the
file under that name; it is swept the same way once it is older than any live run's would be.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from logging import Logger, LoggerAdapter
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.settings import get_current_settings
from prefect.states import Crashed

from pipeline.store.held_file import PENDING_SUFFIX, create_held, is_pending, take_if_over, too_young_to_judge

# A file naming a flow run the current API does not know (one of another server's) is left to a run that talks to
# that server, but not for ever: after this long it is removed.
FORGET_AFTER_S = 7 * 86400
UNFINISHED = frozenset({StateType.RUNNING, StateType.PENDING})
_MESSAGE = "the idflow process running this flow run ended without reporting it (killed, out of memory, power cut)"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def leased(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """A flow body that first marks the flow runs of dead processes Crashed, then runs under its own lease
    (`@flow` goes on top: Prefect reads the parameters through `functools.wraps`)."""
    @functools.wraps(fn)
    async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        logger = get_run_logger()
        await crash_dead_runs(logger)
        async with flow_run_lease(flow_run.id, logger):
            return await fn(*args, **kwargs)
    return run


def leases_dir() -> Path:
    """Where the lease files live: beside Prefect's own files, so every run using that Prefect home sees them."""
    return Path(get_current_settings().home) / "idflow-runs"


@asynccontextmanager
async def flow_run_lease(flow_run_id: UUID | str, logger: Logger | LoggerAdapter[Any]) -> AsyncIterator[None]:
    """Hold the lease file of `flow_run_id` for the block. The file is locked before it gets its name, so a
    sweep never finds the file of a live run unlocked. A Prefect home where it cannot be written costs the run
    only this: a warning, and a kill would leave the flow run Running."""
    folder = leases_dir()
    path = folder / str(flow_run_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = create_held(path)
    except OSError as exc:
        logger.warning("no lease file for this flow run in %s (%s): if this process is killed, its flow run "
                       "stays Running", folder, exc.strerror or type(exc).__name__)
        yield
        return
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock goes: a sweep that takes it next finds no file
        os.close(fd)


async def crash_dead_runs(logger: Logger | LoggerAdapter[Any]) -> None:
    """Mark Crashed the flow runs whose lease file is left behind by a dead process (no API client at all when
    there is no lease file: the common case, on every run's start-up).

    Never fails the run that calls it: a file or an API call that does not work out is logged and passed over.
    """
    folder = leases_dir()
    try:
        names = [p for p in folder.iterdir() if _lease_id(p) is not None]
    except OSError:
        return  # none yet, or a Prefect home this run cannot read: `flow_run_lease` says so
    if not names:
        return
    async with get_client() as client:
        for path in names:
            try:
                await _crash_if_dead(client, path, logger)
            except Exception as exc:  # noqa: BLE001 - best effort: the calling run goes on regardless
                logger.warning("could not check flow run %s for a dead process: %s: %s", path.name,
                               type(exc).__name__, exc)


async def _crash_if_dead(client: Any, path: Path, logger: Logger | LoggerAdapter[Any]) -> None:
    fd = take_if_over(path)
    if fd is None:
        return  # its run is alive, or ended normally while this sweep was opening the file
    try:
        flow_run_id = _lease_id(path)
        if is_pending(path) and too_young_to_judge(fd):
            return  # maybe a live run between creating and locking it
        try:
            run = await client.read_flow_run(flow_run_id)
        except ObjectNotFound:
            if time.time() - os.fstat(fd).st_mtime > FORGET_AFTER_S:
                path.unlink(missing_ok=True)
            return  # another server's run: left to a run that talks to that server
        if run.state is not None and run.state.type in UNFINISHED:
            await client.set_flow_run_state(run.id, Crashed(message=_MESSAGE), force=True)
            logger.warning("flow run '%s' marked Crashed: %s", run.name, _MESSAGE)
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _lease_id(path: Path) -> UUID | None:
    """The flow run a lease file is for: named `<id>`, or `.<id>.new` before it got that name; None for any other
    file."""
    name = path.name
    if is_pending(path):
        name = name[1:-len(PENDING_SUFFIX)]
    try:
        return UUID(name)
    except ValueError:
        return None
