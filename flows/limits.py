"""The Prefect global concurrency limit on in-flight model requests, one per backend.

Why global: the backend's own in-flight cap holds only inside one run; the nightly run, an upload-triggered run
and a retry run in other processes would each fill it. One named limit per backend (`idflow-requests-ocr`,
`idflow-requests-openai`, ...) is shared by every run that calls that endpoint.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL


def request_limit_name(backend: str) -> str:
    return f"idflow-requests-{backend}"


RECHECK_S = 60.0  # how long a lookup is trusted (long-lived processes, e.g. Dask workers, see a new limit)
_EXISTS: dict[tuple[str, str], tuple[bool, float]] = {}  # (API URL, limit name) -> (exists, when looked up)
# one lookup at a time per limit and event loop (a lock belongs to the loop it first waited in)
_LOOKUPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Lock]] = \
    weakref.WeakKeyDictionary()


async def _limit_exists(name: str) -> bool:
    """Whether the limit exists, looked up once per `RECHECK_S`: the first requests of a run all ask at once, and
    each lookup opens a Prefect client (a TLS context and a connection), so one asks and the others wait for it."""
    key = (str(PREFECT_API_URL.value()), name)
    async with _LOOKUPS.setdefault(asyncio.get_running_loop(), {}).setdefault(key, asyncio.Lock()):
        known = _EXISTS.get(key)
        if known is None or time.monotonic() - known[1] > RECHECK_S:
            async with get_client() as client:
                try:
                    await client.read_global_concurrency_limit_by_name(name)
                    known = (True, time.monotonic())
                except ObjectNotFound:
                    known = (False, time.monotonic())
            _EXISTS[key] = known
    return known[0]


@asynccontextmanager
async def request_slots(backend: str, occupy: int) -> AsyncIterator[None]:
    """Hold `occupy` slots of the backend's request limit around a batch of model calls.

    Without the limit (a plain `idflow run`, e.g. on its temporary server) there is nothing to hold: the run
    goes ahead without asking Prefect for slots, which would warn `... do not exist - skipping acquisition`
    on every batch. `idflow serve` creates the limit, and the README's `prefect deploy` steps create it by
    hand; `strict=False` only covers a limit deleted during the run.
    """
    if not await _limit_exists(request_limit_name(backend)):
        yield
        return
    async with concurrency(request_limit_name(backend), occupy=max(1, occupy), strict=False):
        yield


async def ensure_request_limit(backend: str, limit: int) -> bool:
    """Create the backend's request limit if it is missing (an existing one is left as the operator set it).
    Returns True when it was created."""
    name = request_limit_name(backend)
    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(name)
            created = False
        except ObjectNotFound:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))
            created = True
    _EXISTS[(str(PREFECT_API_URL.value()), name)] = (True, time.monotonic())
    return created
