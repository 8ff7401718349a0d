"""What every `idflow` command module shares: the console and configuration errors (exit 2, values never echoed).

Why a module of its own: `idflow.cli` registers the command modules (`ops`, `vllm`, `batch`, ...); they import
these helpers from here, never from `idflow.cli`, so the imports run one way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from pipeline.extract.registry import backend_spec
from pipeline.masking import redact
from pipeline.settings import Settings, VllmSettings

console = Console()

CONFIG_ERROR = 2
PREFECT_ERROR = 3  # the Prefect API does not answer, or the local server did not start
ERROR_LOG = "idflow-errors.log"  # in the Prefect home: tracebacks the console leaves out, masked

T = TypeVar("T")


def config_error(message: str) -> typer.Exit:
    """Exit 2 with the message as plain text (`idflow[dask]` is not markup), document numbers masked."""
    console.print(f"[red]configuration error:[/red] {escape(redact(message))}", soft_wrap=True)
    return typer.Exit(CONFIG_ERROR)


def error_log() -> Path:
    """Where the tracebacks of a run that could not go on are kept: outside OUT (which may be what is full or
    read-only), in the Prefect home."""
    home = os.environ.get("PREFECT_HOME")
    if not home:
        from prefect.settings import get_current_settings

        home = str(get_current_settings().home)
    return Path(home).expanduser() / ERROR_LOG


def environment_error(message: str, exc: BaseException, *, debug: bool = False) -> typer.Exit:
    """Exit 2 with one line (masked) for a run the machine stopped (OUT full, read-only): what happened, what to
    do, and where the traceback went (the error log; also the console under `--debug`)."""
    text = redact("".join(traceback.format_exception(exc)))
    log = error_log()
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {redact(message)}\n{text}\n")
        where = f" (details: {log})"
    except OSError:  # the log's disk may be the full one: the line is what matters
        where = ""
    if debug:
        console.print(escape(text), markup=True, soft_wrap=True)
    console.print(f"[red]error:[/red] {escape(redact(message))}{escape(where)}", soft_wrap=True)
    return typer.Exit(CONFIG_ERROR)


class _EngineErrors(logging.Filter):
    """Keeps Prefect's error records (a failed flow run's traceback, its 'Finished in state Failed') off the
    console: the command says in one line what went wrong; the records go to the error log and the Prefect API."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("prefect") and record.levelno >= logging.ERROR)


@contextmanager
def engine_errors_to_log(*, debug: bool) -> Iterator[None]:
    """For the block, Prefect's error records go to the error log instead of the console (`debug`: both). Call it
    once Prefect is imported (importing it installs its console handler on the root logger)."""
    if debug:
        yield
        return
    from pipeline.masking import MaskingFilter

    root = logging.getLogger()
    consoles = [h for h in root.handlers if type(h).__name__ == "PrefectConsoleHandler"]
    kept = logging.FileHandler(error_log(), encoding="utf-8", delay=True)  # no file unless there is an error
    kept.setLevel(logging.ERROR)
    kept.addFilter(MaskingFilter())
    kept.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    quiet = _EngineErrors()
    for handler in consoles:
        handler.addFilter(quiet)
    root.addHandler(kept)
    try:
        yield
    finally:
        root.removeHandler(kept)
        kept.close()
        for handler in consoles:
            handler.removeFilter(quiet)


def holding_output(out: Path, start: Callable[[], Awaitable[T]], *, wait: bool, debug: bool, what_now: str) -> T:
    """Run `start()` (a command's flow) holding OUT's lock, taken here before any flow run exists and lent to the
    run session inside the flow; every way OUT stops the run is one line: busy (who holds it; `--wait`), damaged,
    not writable, full (where, how much is kept, what to do), exit 2. A SIGTERM: `stopped_by_signal(what_now)`."""
    from pipeline.run.session import OutputWriteError, storage_problem, what_to_do
    from pipeline.store.output_lock import OutputBusy, OutputUnwritable, hold_output
    from pipeline.store.parquet import OutputUnreadable

    def waiting(message: str) -> None:
        console.print(escape(redact(message)), soft_wrap=True)

    async def held() -> T:
        async with hold_output(out, run_id=f"starting (pid {os.getpid()})", wait=wait, on_wait=waiting,
                               lend=True):
            return await start()

    try:
        with stopped_by_signal(what_now):
            return asyncio.run(held())
    except (OutputBusy, OutputUnreadable) as exc:  # one run writes OUT at a time; OUT damaged from outside
        raise config_error(str(exc)) from None
    except (OutputUnwritable, OutputWriteError) as exc:
        raise environment_error(str(exc), exc, debug=debug) from None
    except Exception as exc:
        problem = storage_problem(exc)
        if problem is None:
            raise
        raise environment_error(f"{problem.filename or out} could not be written ({problem.strerror}): "
                                f"{what_to_do(problem)}", exc, debug=debug) from None


def refuse_unless_free(out: Path, *, wait: bool, debug: bool) -> None:
    """Before a command starts Prefect: OUT busy (and not `--wait`) is one line, exit 2; OUT whose lock cannot be
    opened for writing (read-only after a first run) is the line a run would end with, exit 2, without starting
    Prefect for a run that could only fail."""
    from pipeline.store.output_lock import OutputUnwritable, refusal_now

    try:
        busy = refusal_now(out)
    except OutputUnwritable as exc:
        raise environment_error(str(exc), exc, debug=debug) from None
    if busy and not wait:
        raise config_error(busy)


def settings_problems(exc: ValidationError) -> str:
    """Which settings are wrong and why, without echoing the values (one of them may be a key); a number out of
    bounds is told its whole range."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}{_range(e['loc'])}"
                     for e in exc.errors(include_input=False))


def _range(loc: tuple[Any, ...]) -> str:
    """` (range 1-256)` for a bounded field of the settings at `loc` (top level or one model down), else ""."""
    model: Any = Settings
    for name in loc[:-1]:
        field = model.model_fields.get(str(name))
        model = field.annotation if field is not None else None
        if not isinstance(model, type) or not hasattr(model, "model_fields"):
            return ""
    field = model.model_fields.get(str(loc[-1])) if loc else None
    if field is None:
        return ""
    low = next((getattr(m, a) for m in field.metadata for a in ("ge", "gt") if getattr(m, a, None) is not None), None)
    high = next((getattr(m, a) for m in field.metadata for a in ("le", "lt") if getattr(m, a, None) is not None), None)
    if low is None and high is None:
        return ""
    return f" (range {'' if low is None else low}-{'' if high is None else high})" if high is not None \
        else f" (at least {low})"


def load_settings(**overrides: object) -> Settings:
    """Settings from environment/.env plus CLI overrides (`vllm_fallback`: the pool's IDFLOW_VLLM_FALLBACK); a bad
    value, or what the backend's own check finds missing (a key, a model, a pool), is a configuration error
    (exit 2)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        if "vllm_fallback" in given:  # the pool's other settings as the environment and .env give them
            given["vllm"] = VllmSettings(fallback=given.pop("vllm_fallback"))
        settings = Settings(**given)
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


@dataclass(frozen=True)
class PrefectApi:
    """The Prefect API a command used: `ui` is the address of its UI (None: nobody serves one), `local` whether it
    is idflow's local server (which stays up `idle_s` after the last run)."""

    url: str | None
    ui: str | None
    local: bool
    idle_s: float = 0.0


@contextmanager
def prefect_api(settings: Settings | None = None, *, ui: bool | None = None) -> Iterator[Callable[[], PrefectApi]]:
    """A Prefect API for a command that runs a flow: the configured one, or the local server runs share
    (`flows/local_server.py`, started when none runs, as `settings` say: the command's, else read here; `ui`: with
    Prefect's UI or not whatever they say).
    Yields `ready()`: import the flows first, then call it, so a server's start-up overlaps the imports; it
    returns the API in use. A server that does not start, or that stops answering during the command (once
    Prefect's client has given up), is one line and exit 3."""
    from flows.local_server import BackgroundServer, ServerStartError, forget_prefect_queues, without_userinfo

    api_url: list[str] = []  # the API the command uses, once `ready()` has found it
    if settings is None:
        try:
            settings = Settings()
        except ValidationError as exc:  # str(exc) would echo the values, the key among them
            raise config_error(settings_problems(exc)) from None
    with BackgroundServer(ui=settings.prefect_ui if ui is None else ui,
                          idle_s=settings.prefect_server_idle_s) as server:
        def ready() -> PrefectApi:
            try:
                url = server.wait()
            except ServerStartError as exc:
                console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
                raise typer.Exit(PREFECT_ERROR) from None
            if url:
                api_url.append(url)
            if url is not None and url == server.api_url:
                return PrefectApi(url, server.ui_url, local=True, idle_s=server.idle_s)
            return PrefectApi(url, _configured_ui(), local=False)

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
            forget_prefect_queues()  # undeliverable now; Prefect would retry each event for 7 s before exiting
            raise typer.Exit(PREFECT_ERROR) from None


def _configured_ui() -> str | None:
    """The UI of a configured Prefect API (`PREFECT_UI_URL`, else what Prefect derives from the API's URL)."""
    from prefect.settings import get_current_settings

    return get_current_settings().ui_url


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
    """A flow stopped by SIGTERM (its body ends with `TerminationSignal` at the await it was waiting on,
    `flows.sigterm`; the flow has flushed what it must and is marked Crashed) ends the command with one line
    saying `what_now`, and exit 128 + the signal's number, instead of a traceback.

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
    from pipeline.run.session import first_in_chain

    return first_in_chain(exc, lambda e: isinstance(e, kind))
