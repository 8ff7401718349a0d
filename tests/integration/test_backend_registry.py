"""The backend registry is the one map from backend names to implementations: every registered name builds a
backend of that name, an unknown name is refused with the known ones, each kind's configuration check finds
what its run would lack, and the run fingerprint of every kind is the one existing output folders were
written with (their done sets stay valid)."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError

from idflow.common import load_settings
from pipeline.extract.factory import make_backend
from pipeline.extract.model.prompts import PROMPT_VERSION
from pipeline.extract.registry import (BACKEND_NAMES, REGISTRY, VLLM_KEY_MISSING, VLM_NAMES, backend_spec, find_spec,
                                       fingerprint, fingerprint_material, model_name)
from pipeline.settings import SCHEMA_PATH, Settings
from tests.support.paths import REPO

KEY = "sk-registry-test-key"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Settings from the test alone: no key, model or pool from the developer's environment or `.env`."""
    for name in list(os.environ):
        if name.startswith(("IDFLOW_", "TAOTOKEN_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def runnable(backend: str, tmp_path: Path, **overrides: object) -> Settings:
    """Settings a run of `backend` accepts (an API key and model; a pool of one loopback endpoint)."""
    return Settings(backend=backend, openai={"api_key": KEY, "model": "qwen-vl-test"},
                    vllm={"endpoints": "http://127.0.0.1:9/v1", "model": "served-test", "api_key": "pool-key",
                          "state_dir": tmp_path / "vllm"}, **overrides)


# -- one map ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_every_registered_name_builds_a_backend_of_that_name(name: str, tmp_path: Path) -> None:
    settings = runnable(name, tmp_path)
    backend = make_backend(settings)
    try:
        assert backend.name == name == backend_spec(name).name
        assert type(backend).__name__ == REGISTRY[name].implementation.rpartition(":")[2]
    finally:
        asyncio.run(backend.aclose())


def test_hybrid_builds_its_halves_from_the_registry(tmp_path: Path) -> None:
    for vlm in VLM_NAMES:
        backend = make_backend(runnable("hybrid", tmp_path, hybrid_vlm=vlm))
        try:
            assert (backend._ocr.name, backend._vlm.name) == ("ocr", vlm)  # type: ignore[attr-defined]
        finally:
            asyncio.run(backend.aclose())


def test_an_unknown_name_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown backend 'tesseract': use one of ocr, openai, vllm, hybrid"):
        make_backend(runnable("ocr", tmp_path), "tesseract")
    with pytest.raises(ValidationError, match="'ocr', 'openai', 'vllm' or 'hybrid'"):
        Settings(backend="tesseract")
    with pytest.raises(ValidationError, match="'openai' or 'vllm'"):
        Settings(backend="hybrid", hybrid_vlm="ocr")
    assert find_spec("tesseract") is None


def test_the_cli_lists_the_registered_names(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDFLOW_", "TAOTOKEN_"))}
    env["COLUMNS"] = "200"
    shown = subprocess.run([sys.executable, "-m", "idflow", "run", "--help"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, check=True, timeout=120).stdout
    assert " | ".join(BACKEND_NAMES) in shown
    refused = subprocess.run([sys.executable, "-m", "idflow", "run", str(tmp_path), "--backend", "tesseract"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert refused.returncode == 2
    assert "'ocr', 'openai', 'vllm' or 'hybrid'" in refused.stdout


def _backend_name_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module compares a value with a backend name, lists two or more backend names, or spells the
    names out for a help text."""
    names = set(BACKEND_NAMES)

    def is_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, left, right in zip(node.ops, [node.left, *node.comparators], node.comparators):
                if isinstance(op, (ast.Eq, ast.NotEq)) and (is_name(left) or is_name(right)):
                    found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Set, ast.Tuple, ast.List)) and sum(map(is_name, node.elts)) >= 2:
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and sum(k is not None and is_name(k) for k in node.keys) >= 2:
            found.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and re.search(r"\b(ocr|openai|vllm|hybrid) \| (ocr|openai|vllm|hybrid)\b", node.value)):
            found.append((node.lineno, node.value))
    return found


# The one other list: the settings' types, so a wrong name is refused when the settings are read. The settings
# import nothing of the pipeline, so they cannot ask the registry; the registry checks at import that its kinds are
# exactly these (`test_the_settings_name_the_registered_kinds`).
SETTINGS_DECLARATIONS = {"Literal['ocr', 'openai', 'vllm', 'hybrid']", "Literal['openai', 'vllm']"}


def test_nothing_but_the_registry_compares_or_lists_backend_names() -> None:
    offenders = {}
    for package in ("pipeline", "flows", "idflow", "bench", "tools"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "pipeline" / "extract" / "registry.py":
                continue
            hits = _backend_name_literals(ast.parse(path.read_text(encoding="utf-8")))
            if path == REPO / "pipeline" / "settings.py":
                hits = [(line, text) for line, text in hits
                        if f"Literal[{text.strip('()')}]" not in SETTINGS_DECLARATIONS]
            if hits:
                offenders[str(path.relative_to(REPO))] = hits
    assert offenders == {}


def test_the_settings_name_the_registered_kinds() -> None:
    from typing import get_args

    from pipeline.settings import Backend, VlmBackend

    assert get_args(Backend) == BACKEND_NAMES and get_args(VlmBackend) == VLM_NAMES


def test_the_scan_finds_what_it_forbids() -> None:
    code = ('if backend == "hybrid": pass\nREADERS = frozenset({"ocr", "hybrid"})\n'
            'HELP = "openai | vllm"\nok = "vllm" in cmdline\n')
    assert sorted(line for line, _ in _backend_name_literals(ast.parse(code))) == [1, 2, 3]


# -- properties instead of names ----------------------------------------------------------------------------


def test_the_spec_properties(tmp_path: Path) -> None:
    assert {n for n, s in REGISTRY.items() if s.reads_full_pixels} == {"ocr", "hybrid"}
    assert VLM_NAMES == ("openai", "vllm")
    assert [n for n, s in REGISTRY.items() if s.pooled] == ["vllm"]
    assert [n for n, s in REGISTRY.items() if s.escalates] == ["hybrid"]
    assert {n: s.url_setting for n, s in REGISTRY.items() if s.url_setting} == {
        "openai": "TAOTOKEN_BASE_URL", "vllm": "IDFLOW_VLLM_ENDPOINTS"}
    settings = runnable("ocr", tmp_path)
    assert backend_spec("ocr").vlm_of(settings) is None
    assert backend_spec("openai").vlm_of(settings) is backend_spec("openai")
    assert backend_spec("hybrid").vlm_of(settings.model_copy(update={"hybrid_vlm": "vllm"})) is backend_spec("vllm")


def test_the_ocr_reads_both_directions_below_the_classifiers_bar() -> None:
    from pipeline.extract.ocr.backend import SURE_DIRECTION
    from pipeline.prepare.orient import PAGE_MIN_CONFIDENCE

    assert SURE_DIRECTION == PAGE_MIN_CONFIDENCE


@pytest.mark.parametrize(("backend", "absent", "present"), [
    ("ocr", ["openai", "httpx", "pipeline.extract.model.openai_compat"], ["pipeline.extract.ocr.backend"]),
    ("openai", ["onnxruntime", "rapidocr", "pipeline.extract.ocr.backend"], ["openai"]),
    ("vllm", ["onnxruntime", "rapidocr", "pipeline.extract.ocr.backend"], ["httpx", "pipeline.extract.model.vllm_pool"]),
])
def test_building_a_backend_loads_only_what_it_uses(backend: str, absent: list[str], present: list[str],
                                                    tmp_path: Path) -> None:
    """Loading the settings loads no implementation; building one kind loads nothing of another."""
    script = f"""
import asyncio, sys
from pipeline.extract.registry import fingerprint
from pipeline.settings import Settings
settings = Settings(backend={backend!r}, openai={{"api_key": "k", "model": "m"}},
                    vllm={{"endpoints": "http://127.0.0.1:9/v1", "model": "m", "api_key": "k"}})
fingerprint(settings)
assert not [m for m in sys.modules if m.startswith(("openai", "onnxruntime", "rapidocr", "pipeline.extract.ocr.backend",
                                                    "pipeline.extract.model.openai_compat"))], "settings alone"
from pipeline.extract.factory import make_backend
backend = make_backend(settings)
asyncio.run(backend.aclose())
print(sorted({{m.split(".")[0] for m in sys.modules}} | set(sys.modules)))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDFLOW_", "TAOTOKEN_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    loaded = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert not loaded & set(absent) and set(present) <= loaded


# -- configuration checks -----------------------------------------------------------------------------------


def test_the_ocr_needs_no_configuration(tmp_path: Path) -> None:
    assert backend_spec("ocr").check(Settings(backend="ocr")) is None
    assert load_settings(backend="ocr").backend == "ocr"


@pytest.mark.parametrize("backend", ["openai", "hybrid"])
def test_the_api_needs_a_key_and_a_model(backend: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    check = backend_spec(backend).check
    assert "TAOTOKEN_API_KEY is not set" in str(check(Settings(backend=backend)))
    assert "TAOTOKEN_MODEL is not set" in str(check(Settings(backend=backend, openai={"api_key": KEY})))
    assert check(Settings(backend=backend, openai={"api_key": KEY, "model": "m"})) is None
    monkeypatch.setenv("IDFLOW_OPENAI_KEY_BLOCK", "taotoken-key")  # the key comes from a Prefect block
    assert check(Settings(backend=backend, openai={"model": "m"})) is None
    monkeypatch.delenv("IDFLOW_OPENAI_KEY_BLOCK")
    with pytest.raises(typer.Exit) as stopped:
        load_settings(backend=backend)
    assert stopped.value.exit_code == 2
    assert "configuration error: TAOTOKEN_API_KEY is not set" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("backend", ["vllm", "hybrid"])
def test_the_pool_needs_endpoints_and_their_key(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    check = backend_spec(backend).check
    state = {"state_dir": tmp_path / "vllm"}

    def settings(**vllm: object) -> Settings:
        return Settings(backend=backend, hybrid_vlm="vllm", vllm={**state, **vllm})

    assert "no vLLM endpoints" in str(check(settings()))
    assert "IDFLOW_VLLM_MODEL is not" in str(check(settings(endpoints="http://127.0.0.1:9/v1")))
    assert check(settings(endpoints="http://127.0.0.1:9/v1", model="m")) == VLLM_KEY_MISSING
    assert check(settings(endpoints="http://127.0.0.1:9/v1", model="m", api_key="k")) is None
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "pool.json").write_text(json.dumps({"endpoints": ["http://127.0.0.1:9/v1"], "model": "m"}))
    assert check(settings(api_key="k")) is None  # the pool `idflow vllm up` wrote
    monkeypatch.setenv("IDFLOW_VLLM_STATE_DIR", str(tmp_path / "vllm"))
    with pytest.raises(typer.Exit) as stopped:
        load_settings(backend=backend, hybrid_vlm="vllm")
    assert stopped.value.exit_code == 2
    assert VLLM_KEY_MISSING in " ".join(capsys.readouterr().out.split())


# -- fingerprints -------------------------------------------------------------------------------------------


def _old_fingerprint(material: dict[str, object]) -> str:
    """How fingerprints were always computed from their material (output folders hold these)."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def _pinned_material(backend: str, settings: Settings) -> dict[str, object]:
    """The fingerprint material of each kind, as output folders were written with it."""
    base = {"backend": backend, "schema": hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest(),
            "prepare": settings.prepare.model_dump()}
    prompt = [PROMPT_VERSION, settings.openai.prompt_lang, settings.openai.use_json_schema]
    if backend == "ocr":
        return {**base, "model": f"rapidocr-{version('rapidocr')}-ppocr"}
    if backend == "openai":
        return {**base, "model": settings.openai.model or "", "prompt": prompt}
    if backend == "vllm":
        return {**base, "model": settings.vllm.served_model, "prompt": prompt}
    vlm_model = settings.openai.model or "" if settings.hybrid_vlm == "openai" else settings.vllm.served_model
    return {**base, "model": vlm_model, "prompt": prompt, "hybrid": [settings.hybrid_vlm, settings.hybrid_threshold]}


FINGERPRINT_CASES = [
    {"backend": "ocr"},
    {"backend": "ocr", "prepare": {"max_long_edge": 1200}},
    {"backend": "openai", "openai": {"model": "qwen-vl"}},
    {"backend": "openai", "openai": {"model": "qwen-vl", "prompt_lang": "zh", "use_json_schema": False}},
    {"backend": "openai"},
    {"backend": "vllm", "vllm": {"model": "Qwen/Qwen3.5-9B"}},
    {"backend": "vllm"},
    {"backend": "hybrid", "openai": {"model": "m2"}},
    {"backend": "hybrid", "hybrid_vlm": "vllm", "hybrid_threshold": 0.8, "vllm": {"model": "served"}},
]


@pytest.mark.parametrize("case", FINGERPRINT_CASES, ids=lambda c: json.dumps(c, sort_keys=True))
def test_fingerprint_material_is_unchanged(case: dict[str, object]) -> None:
    settings = Settings(**case)
    expected = _pinned_material(str(case["backend"]), settings)
    assert fingerprint_material(settings) == expected
    assert model_name(settings) == expected["model"]
    assert fingerprint(settings) == _old_fingerprint(expected)


def test_what_changes_a_result_changes_the_fingerprint() -> None:
    base = Settings(backend="hybrid", openai={"model": "m"})
    changed = [base.model_copy(update=u) for u in ({"hybrid_threshold": 0.9}, {"hybrid_vlm": "vllm"},
                                                   {"backend": "openai"})]
    changed.append(base.model_copy(update={"openai": base.openai.model_copy(update={"prompt_lang": "zh"})}))
    prints = {fingerprint(base), *(fingerprint(s) for s in changed)}
    assert len(prints) == 1 + len(changed)
    ocr = Settings(backend="ocr")
    assert fingerprint(ocr) == fingerprint(ocr.model_copy(update={"openai": ocr.openai.model_copy(
        update={"prompt_lang": "zh"})}))  # the OCR sends no prompt
