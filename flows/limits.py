"""The Prefect global concurrency limit on in-flight model requests, one per backend.

Why global: the backend's own in-flight cap holds only inside one run; the nightly run, an upload-triggered run
and a retry run in other processes would each fill it. One named limit per backend (`idflow-requests-ocr`,
`idflow-requests-openai`, ...) is shared by every run that calls that endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectNotFound


def request_limit_name(backend: str) -> str:
    return f"idflow-requests-{backend}"


@asynccontextmanager
async def request_slots(backend: str, occupy: int) -> AsyncIterator[None]:
    """Hold `occupy` slots of the backend's request limit around a batch of model calls.

    `strict=False`: a plain `idflow run` on a machine without the limit still works (Prefect only warns).
    `idflow serve` creates the limit, and the README's `prefect deploy` steps create it by hand.
    """
    async with concurrency(request_limit_name(backend), occupy=max(1, occupy), strict=False):
        yield


async def ensure_request_limit(backend: str, limit: int) -> bool:
    """Create the backend's request limit if it is missing (an existing one is left as the operator set it).
    Returns True when it was created."""
    name = request_limit_name(backend)
    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(name)
            return False
        except ObjectNotFound:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=limit))
            return True
