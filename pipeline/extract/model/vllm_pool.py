"""Extraction backend over a pool of OpenAI-compatible servers (one `vllm serve` per GPU).

Composition, not a second client: every endpoint is an `OpenAICompatBackend` (same request, same retries,
same answer parsing and repair turn), built with few attempts per endpoint, because the pool has a better
retry than hammering one server: another server. What the pool adds:

- least-in-flight routing with a cap per endpoint (ties go to the endpoint that served fewer pages, so a
  trickle of single pages still spreads);
- ejection after `eject_after` consecutive endpoint failures (timeouts, 5xx, connection errors) and a `/health`
  probe after `probe_after_s` that lets the endpoint back in; the bookkeeping is the backend's own
  `CircuitBreaker`, the probe is `/health` instead of a real request;
- a page whose request fails retryably on one endpoint is sent to another; a page that every healthy endpoint
  failed goes to the fallback backend (`IDFLOW_VLLM_FALLBACK=openai`) or becomes a retryable
  `endpoint_unavailable` failure, so no page is ever lost;
- each result names the endpoint (or fallback backend) that served it, and the attempts spent on the way.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import httpx
from pydantic import SecretStr

from pipeline.datamodel import Extraction, Failure, PreparedImage, Reason
from pipeline.extract.base import ExtractionBackend, Unfinished, finished
from pipeline.extract.model.openai_compat import CircuitBreaker, OpenAICompatBackend, packed
from pipeline.extract.registry import VLLM
from pipeline.settings import OpenAISettings, Settings, VllmSettings
from pipeline.store.atomic import write_json_atomic

log = logging.getLogger(__name__)

NAME = VLLM.name
# Failures that say the endpoint itself is in trouble (count towards ejection); a 429 or a bad answer proves
# the server is alive.
ENDPOINT_DOWN = frozenset({Reason.TIMEOUT, Reason.SERVER_ERROR, Reason.ENDPOINT_UNAVAILABLE})
# The per-endpoint backends never open their own breaker: ejection and re-admission belong to the pool, and
# a second breaker with its own cooldown would keep a re-admitted endpoint refusing requests.
NO_INNER_BREAKER = sys.maxsize
HEALTH_TIMEOUT_S = 2.0


def root_url(base_url: str) -> str:
    """Where `/health` lives: vLLM serves it beside `/v1`, not under it."""
    return base_url.removesuffix("/").removesuffix("/v1")


@dataclass(eq=False)
class Endpoint:
    """One server of the pool and its counters (exposed for `idflow vllm status` and tests)."""

    url: str
    backend: OpenAICompatBackend
    breaker: CircuitBreaker
    cap: int
    in_flight: int = 0
    dispatched: int = 0
    served: int = 0
    failures: int = 0
    ejections: int = 0
    probe: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def healthy(self) -> bool:
        # CircuitBreaker opens exactly when `consecutive` reaches `threshold` and only a success resets it,
        # so "below the threshold" is "closed".
        return self.breaker.consecutive < self.breaker.threshold

    def snapshot(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "in_flight": self.in_flight, "served": self.served,
                "failures": self.failures, "ejections": self.ejections}


class VllmPoolBackend:
    """`ExtractionBackend` routing pages over several endpoints; see the module docstring for the policy."""

    name = NAME

    def __init__(self, endpoints: Sequence[str], *, model: str, api_key: str, pool: VllmSettings,
                 request: OpenAISettings, fallback: ExtractionBackend | None = None,
                 stats_path: Path | None = None) -> None:
        if not endpoints:
            raise ValueError("the vLLM pool needs at least one endpoint")
        self.fallback = fallback
        self.stats_path = stats_path
        self.endpoints = [self._endpoint(url, model, api_key, pool, request) for url in endpoints]
        self.retried_elsewhere = 0  # pages that moved to another endpoint after a retryable failure
        self.sent_to_fallback = 0
        self.unavailable = 0  # pages that ended as endpoint_unavailable for want of any healthy endpoint
        self._changed = asyncio.Condition()
        self._health = httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S)

    @staticmethod
    def _endpoint(url: str, model: str, api_key: str, pool: VllmSettings, request: OpenAISettings) -> Endpoint:
        settings = request.model_copy(update={
            "base_url": url, "api_key": SecretStr(api_key), "model": model,
            "max_attempts": pool.attempts_per_endpoint, "breaker_threshold": NO_INNER_BREAKER})
        return Endpoint(url=url, cap=pool.per_endpoint_concurrency,
                        backend=OpenAICompatBackend(settings, concurrency=pool.per_endpoint_concurrency, name=NAME),
                        breaker=CircuitBreaker(pool.eject_after, pool.probe_after_s))

    @classmethod
    def from_run_settings(cls, settings: Settings) -> VllmPoolBackend:
        return cls.from_settings(settings.vllm, settings.openai, concurrency=settings.concurrency)

    @classmethod
    def from_settings(cls, pool: VllmSettings, request: OpenAISettings, *, concurrency: int) -> VllmPoolBackend:
        """The pool `--backend vllm` runs on: endpoints from the environment or the pool file,
        the API backend as fallback when `IDFLOW_VLLM_FALLBACK=openai`."""
        config = pool.resolve_pool()
        if pool.api_key is None:
            raise ValueError("IDFLOW_VLLM_API_KEY is not set (the key the servers were started with)")
        fallback = OpenAICompatBackend(request, concurrency=concurrency) if pool.fallback != "none" else None
        from_pool_file = config.source == str(pool.pool_file)
        return cls(config.endpoints, model=config.model, api_key=pool.api_key.get_secret_value(), pool=pool,
                   request=request, fallback=fallback, stats_path=pool.stats_file if from_pool_file else None)

    def pack(self, page: PreparedImage) -> PreparedImage:
        """The page as every endpoint (and the fallback) sends it (`ExtractionBackend.pack`)."""
        return packed(page)

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        """One result per page, in input order; pages wait for a free endpoint slot, so the caps bound what
        is sent whatever the batch size."""
        return await finished(await self.extract_deferring(batch))

    async def extract_deferring(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure | Unfinished]:
        """As `extract`, except that a page whose answer waits for the embedded second reading comes back
        `Unfinished` once its endpoint slot is free again (`OpenAICompatBackend.extract_deferring`)."""
        return list(await asyncio.gather(*(self._extract_guarded(page) for page in batch)))

    async def aclose(self) -> None:
        for endpoint in self.endpoints:
            if endpoint.probe is not None:
                endpoint.probe.cancel()
            await endpoint.backend.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()
        await self._health.aclose()
        self._write_stats()

    def snapshot(self) -> dict[str, Any]:
        return {"endpoints": {e.url: e.snapshot() for e in self.endpoints},
                "retried_elsewhere": self.retried_elsewhere, "sent_to_fallback": self.sent_to_fallback,
                "unavailable": self.unavailable}

    # -- one page -----------------------------------------------------------------------------------------

    async def _extract_guarded(self, page: PreparedImage) -> Extraction | Failure | Unfinished:
        try:
            return await self._extract_page(page)
        except Exception as exc:  # a bug in the pool must cost one page, not the batch
            log.exception("unexpected error routing page %s", page.ref.sha256[:12])
            return Failure.for_ref(page.ref, "internal", Reason.INTERNAL_ERROR,
                                   f"pool error: {type(exc).__name__}: {exc}", attempts=0, backend=NAME)

    async def _extract_page(self, page: PreparedImage) -> Extraction | Failure | Unfinished:
        tried: set[str] = set()
        spent: list[Failure] = []
        while (endpoint := await self._acquire(tried)) is not None:
            outcome: Extraction | Failure | Unfinished | None = None
            try:
                (outcome,) = await endpoint.backend.extract_deferring([page])
            finally:
                await self._release(endpoint, outcome)
            if isinstance(outcome, (Extraction, Unfinished)) or not (outcome.stage == "request"
                                                                     and outcome.retryable):
                return _with_attempts(outcome, spent)  # an answer, or a failure any server would repeat
            spent.append(outcome)
            tried.add(endpoint.url)
            self.retried_elsewhere += 1
        return await self._without_pool(page, spent)

    async def _without_pool(self, page: PreparedImage, spent: list[Failure]) -> Extraction | Failure | Unfinished:
        if self.fallback is not None:
            self.sent_to_fallback += 1
            (outcome,) = await self.fallback.extract_deferring([page])
            return _with_attempts(outcome, spent)
        self.unavailable += 1
        last = f"; last error: {spent[-1].detail}" if spent else ""
        return Failure.for_ref(page.ref, "request", Reason.ENDPOINT_UNAVAILABLE,
                               f"no healthy vLLM endpoint ({len(self.endpoints)} in the pool, {len(spent)} tried)"
                               f"{last}", attempts=sum(f.attempts for f in spent), backend=NAME)

    # -- routing ------------------------------------------------------------------------------------------

    async def _acquire(self, tried: set[str]) -> Endpoint | None:
        """A slot on the healthy, untried endpoint with the fewest requests in flight; waits while all of them
        are full or a probe may bring one back; None when no endpoint can take the page."""
        async with self._changed:
            while True:
                self._start_due_probes()
                usable = [e for e in self.endpoints if e.url not in tried]
                healthy = [e for e in usable if e.healthy]
                if not healthy:
                    if any(e.probe is not None for e in usable):
                        await self._changed.wait()
                        continue
                    return None
                free = [e for e in healthy if e.in_flight < e.cap]
                if free:
                    best = min(free, key=lambda e: (e.in_flight, e.dispatched))
                    best.in_flight += 1
                    best.dispatched += 1
                    return best
                await self._changed.wait()

    async def _release(self, endpoint: Endpoint, outcome: Extraction | Failure | Unfinished | None) -> None:
        async with self._changed:
            endpoint.in_flight -= 1
            if isinstance(outcome, (Extraction, Unfinished)):
                endpoint.served += 1
                endpoint.breaker.record_success()
            elif isinstance(outcome, Failure) and outcome.stage == "request" and outcome.reason in ENDPOINT_DOWN:
                was_healthy = endpoint.healthy
                endpoint.failures += 1
                endpoint.breaker.record_failure()
                if was_healthy and not endpoint.healthy:
                    endpoint.ejections += 1
                    log.warning("vLLM endpoint %s ejected after %d consecutive failures (last: %s); probing "
                                "/health again in %g s", endpoint.url, endpoint.breaker.consecutive,
                                outcome.reason, endpoint.breaker.cooldown_s)
                    self._write_stats()
            elif outcome is not None:
                endpoint.breaker.record_success()  # it answered: alive, whatever the answer was worth
            self._changed.notify_all()

    def _start_due_probes(self) -> None:
        """Called with the condition held: one `/health` probe per ejected endpoint whose cooldown is over."""
        for endpoint in self.endpoints:
            if not endpoint.healthy and endpoint.probe is None and endpoint.breaker.allow():
                endpoint.probe = asyncio.create_task(self._probe(endpoint))

    async def _probe(self, endpoint: Endpoint) -> None:
        try:
            ok = (await self._health.get(f"{root_url(endpoint.url)}/health")).status_code == 200
        except httpx.HTTPError:
            ok = False
        async with self._changed:
            endpoint.probe = None
            if ok:
                endpoint.breaker.record_success()
                log.info("vLLM endpoint %s answers /health again: back in the pool", endpoint.url)
                self._write_stats()
            else:
                endpoint.breaker.record_failure()
            self._changed.notify_all()

    def _write_stats(self) -> None:
        """For `idflow vllm status`: the counters of this process's pool, written when health changes and at
        the end (small file, atomic rename)."""
        if self.stats_path is not None:
            write_json_atomic(self.stats_path, self.snapshot())


def _with_attempts(outcome: Extraction | Failure | Unfinished,
                   spent: Sequence[Failure]) -> Extraction | Failure | Unfinished:
    """The outcome with the attempts spent on endpoints that failed before it added in (an `Unfinished` one's
    once it is finished)."""
    extra = sum(f.attempts for f in spent)
    if isinstance(outcome, Unfinished):
        if not extra:
            return outcome
        pending = outcome

        async def finish() -> Extraction | Failure:
            done = await pending.finish()
            done.attempts += extra
            return done
        return Unfinished(outcome.ref, finish)
    outcome.attempts += extra
    return outcome
