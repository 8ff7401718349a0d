"""What the wheel must carry (the full check, build + fresh venv + run elsewhere, is .ci/check_wheel)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pipeline
from pipeline.extract.model.prompts import load_prompt
from pipeline.settings import SCHEMA_PATH
from tests.support.paths import REPO

PACKAGE = Path(pipeline.__file__).resolve().parent


def test_runtime_files_are_package_data_and_the_root_schemas_folder_is_no_copy() -> None:
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    runtime = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
               if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert runtime and all(any(fnmatch(f, pattern) for pattern in package_data["pipeline"]) for f in runtime), runtime
    assert Path(str(SCHEMA_PATH)).resolve().parent == PACKAGE / "schemas"
    assert (REPO / "schemas").is_symlink() and (REPO / "schemas").resolve() == PACKAGE / "schemas"
    assert load_prompt("en") and SCHEMA_PATH.read_text(encoding="utf-8").startswith("{")


def test_the_orientation_model_is_in_the_package_with_the_hash_its_provenance_gives() -> None:
    """The model is committed (a fresh clone runs with no fetch step); the file, the refresh script and the models
    README name the same SHA-256, so a refreshed or damaged file is noticed."""
    import hashlib
    import re

    model = PACKAGE / "prepare" / "models" / "page_orientation.onnx"
    script = (REPO / "tools" / "fetch_page_orientation_model.py").read_text(encoding="utf-8")
    expected = re.search(r'^SHA256 = "([0-9a-f]{64})"', script, re.M)
    assert expected and hashlib.sha256(model.read_bytes()).hexdigest() == expected.group(1)
    assert expected.group(1) in (model.parent / "README.md").read_text(encoding="utf-8")


def test_the_glyph_model_is_in_the_package_with_the_hash_its_provenance_gives() -> None:
    """The zone glyph reader's model is committed and its README (provenance, training command) names its SHA-256,
    so a retrained or damaged file is noticed; it loads without pickle."""
    import hashlib

    from pipeline.extract.ocr import mrz_glyphs

    model = PACKAGE / "extract" / "ocr" / "models" / mrz_glyphs.MODEL_FILE
    readme = (model.parent / "README.md").read_text(encoding="utf-8")
    assert hashlib.sha256(model.read_bytes()).hexdigest() in readme
    assert "tools/train_mrz_glyphs.py" in readme and (REPO / "tools" / "train_mrz_glyphs.py").is_file()
    assert mrz_glyphs.shipped() is not None


def test_every_install_command_goes_through_the_constraints_file_which_pins_every_direct_dependency() -> None:
    """The README's two commands, `.ci/run` and `.ci/check_wheel` install through `constraints.txt`, and it pins
    each dependency of the package and of the `test` extra exactly, inside the range `pyproject.toml` allows (a
    pin outside it would make pip refuse the install)."""
    import re

    from packaging.requirements import Requirement

    texts = [(REPO / name).read_text(encoding="utf-8") for name in ("README.md", ".ci/run", ".ci/check_wheel")]
    # every install of the project (editable, or the built wheel), not of a tool such as pip-tools
    installs = [m for text in texts for m in re.findall(r'pip"? install [^&\n]*', text)
                if "-e ." in m or "-e '.[test]'" in m or "idflow-*.whl" in m]
    assert len(installs) == 4, installs  # the README's two, .ci/run's, .ci/check_wheel's wheel
    assert all(re.search(r'-c "?(\$repo/)?constraints\.txt', i) for i in installs), installs
    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith((" ", "#")):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name.lower())] = version.split(";")[0].strip()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        requirement = Requirement(text)
        name = re.sub(r"[-_.]+", "-", requirement.name.lower())
        assert name in pins, f"{name} is not pinned in constraints.txt: run `pip-compile --upgrade pyproject.toml`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])
