"""What every `idflow` command module shares: the console and configuration errors (exit 2, values never echoed).

Why a module of its own: `idflow.cli` registers the command modules (`ops`, `vllm`, `batch`, ...); they import
these helpers from here, never from `idflow.cli`, so the imports run one way.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from pipeline.backends.registry import backend_spec
from pipeline.config import Settings
from pipeline.masking import redact
from pipeline.vllm.settings import VllmSettings

console = Console()

CONFIG_ERROR = 2
PREFECT_ERROR = 3  # the Prefect API does not answer, or the local server did not start


def config_error(message: str) -> typer.Exit:
    """Exit 2 with the message as plain text (`idflow[dask]` is not markup), document numbers masked."""
    console.print(f"[red]configuration error:[/red] {escape(redact(message))}")
    return typer.Exit(CONFIG_ERROR)


def settings_problems(exc: ValidationError) -> str:
    """Which settings are wrong and why, without echoing the values (one of them may be a key)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False))


def load_settings(**overrides: object) -> Settings:
    """Settings from environment/.env plus CLI overrides; a bad value, or what the backend's own check finds
    missing (a key, a model, a pool), is a configuration error (exit 2)."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise config_error(settings_problems(exc)) from None
    problem = backend_spec(settings.backend).check(settings)
    if problem is not None:
        raise config_error(problem)
    return settings


def load_settings_pair() -> tuple[Settings, VllmSettings]:
    """The pipeline's settings and the vLLM launcher's, as `idflow vllm` and `idflow batch` read them; a bad value
    is a configuration error (exit 2)."""
    try:
        return Settings(), VllmSettings()
    except ValidationError as exc:  # str(exc) would echo the values, the key among them
        raise config_error(settings_problems(exc)) from None


@contextmanager
def prefect_api() -> Iterator[Callable[[], None]]:
    """A Prefect API for a command that runs a flow: the configured one, or the local server runs share
    (`flows/local_server.py`, started when none runs). Yields `ready()`: import the flows first, then call it, so
    a server's start-up overlaps the imports; a server that does not start, or that stops answering during the
    command (once Prefect's client has given up), is one line and exit 3."""
    from flows.local_server import BackgroundServer, ServerStartError, without_userinfo

    api_url: list[str] = []  # the API the command uses, once `ready()` has found it
    with BackgroundServer() as server:
        def ready() -> None:
            try:
                url = server.wait()
            except ServerStartError as exc:
                console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
                raise typer.Exit(PREFECT_ERROR) from None
            if url:
                api_url.append(url)

        try:
            yield ready
        except Exception as exc:
            import httpx

            lost = _in_chain(exc, httpx.TransportError)
            if not api_url or lost is None or not _same_server(lost, api_url[0]):
                raise
            console.print(f"[red]error:[/red] the Prefect API at {escape(without_userinfo(api_url[0]))} stopped "
                          f"answering ({type(lost).__name__}); what was finished is stored: run the same command "
                          "again", soft_wrap=True)
            raise typer.Exit(PREFECT_ERROR) from None


def _same_server(error: Any, api_url: str) -> bool:
    """The failed request went to the Prefect API at `api_url` (not, say, to a model endpoint)."""
    import httpx

    try:
        target, api = error.request.url, httpx.URL(api_url)
    except RuntimeError:  # an httpx error raised without its request
        return False
    return (target.host, target.port) == (api.host, api.port)


@contextmanager
def stopped_by_signal(what_now: str) -> Iterator[None]:
    """A flow stopped by SIGTERM (Prefect raises its `TerminationSignal` in whichever coroutine runs when the
    signal lands; the flow has flushed what it must and is marked Crashed) ends the command with one line saying
    `what_now`, and exit 128 + the signal's number, instead of a traceback.

    Why a SIGTERM handler of our own for the block: after the flow run has crashed, Prefect restores the handler it
    found and sends SIGTERM again; finding Python's default, that killed the process on the spot (exit -15, no
    line) whenever the signal had reached Prefect's own handler. Ours raises the same `TerminationSignal`."""
    from prefect.exceptions import TerminationSignal

    def terminate(number: int, frame: object) -> None:
        raise TerminationSignal(signal=number)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except BaseException as exc:
        stop = _in_chain(exc, TerminationSignal)
        if stop is None:
            raise
        number = int(getattr(stop, "signal"))
        console.print(f"stopped by signal {number}: {what_now}")
        raise typer.Exit(128 + number) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` when it is a `kind`, else the `kind` it wraps (as the cause or context of another error, or in a
    group), else None."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
