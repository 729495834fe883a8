"""The checks a newcomer expects (issue 13): the import contracts hold on the tree and fail on an upward
import or on Qt outside tuner/ui; the package ships its py.typed marker; CI runs every tool of the dev
extra. (ruff and mypy run in .ci/run; mypy takes about a minute, too slow for the suite.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python): the same parser, published as tomli
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = shutil.which("lint-imports")
needs_lint_imports = pytest.mark.skipif(LINT_IMPORTS is None, reason="lint-imports (import-linter) not installed")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_python_floor_is_one_version_for_pip_ruff_and_mypy() -> None:
    """requires-python, ruff's target-version and mypy's python_version name the same minimum, so neither
    tool lets in a feature the oldest supported Python lacks (tomllib, ExceptionGroup, typing.Self: 3.11)."""
    conf = _pyproject()
    floor = re.fullmatch(r">=\s*3\.(\d+)", conf["project"]["requires-python"].strip())
    assert floor is not None, conf["project"]["requires-python"]
    minor = int(floor.group(1))
    assert conf["tool"]["ruff"]["target-version"] == f"py3{minor}"
    assert conf["tool"]["mypy"]["python_version"] == f"3.{minor}"
    if minor < 11:
        banned = re.compile(r"^\s*(import tomllib|from tomllib|from typing import[^\n]*\bSelf\b)|\bExceptionGroup\b|"
                            r"\bexcept\*|\bStrEnum\b|asyncio\.TaskGroup|datetime\.UTC\b", re.M)
        hits = [str(f.relative_to(REPO)) for f in sorted((REPO / "tuner").rglob("*.py"))
                if banned.search(f.read_text(encoding="utf-8"))]
        assert hits == [], f"Python 3.11-only features in the package (requires-python {minor}): {hits}"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports run in ``root`` (its pyproject.toml, its ``tuner`` package first on the path)."""
    assert LINT_IMPORTS is not None
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "tuner", root / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


@needs_lint_imports
def test_import_contracts_hold() -> None:
    run = _lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", run.stdout), run.stdout


@needs_lint_imports
def test_an_upward_import_breaks_the_layers_contract(tmp_path: Path) -> None:
    """server is below calibration: a (lazy or not) import of calibration from server fails the check."""
    root = _copy_tree(tmp_path)
    config = root / "tuner" / "server" / "config.py"
    config.write_text(config.read_text(encoding="utf-8") + "\n\ndef _upward():\n"
                      "    from tuner.calibration import tune  # deliberately upward\n\n    return tune\n",
                      encoding="utf-8")
    run = _lint_imports(root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "tuner.server is not allowed to import tuner.calibration" in run.stdout, run.stdout
    assert "tuner.server.config -> tuner.calibration.tune" in run.stdout


@needs_lint_imports
def test_qt_outside_tuner_ui_breaks_the_qt_contract(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    settings = root / "tuner" / "settings.py"
    settings.write_text(settings.read_text(encoding="utf-8") + "\nimport PySide6  # noqa: E402,F401\n",
                        encoding="utf-8")
    run = _lint_imports(root)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "tuner.settings is not allowed to import PySide6" in run.stdout, run.stdout


def test_py_typed_ships_with_the_package() -> None:
    assert (REPO / "tuner" / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["tuner"]


def test_ci_runs_every_check_and_the_dev_extra_installs_them() -> None:
    """.ci/run runs ruff, mypy and lint-imports after README's test command, which installs the dev extra
    that provides them (and pre-commit, whose hooks run the same three)."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    dev = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0].lower()
           for req in _pyproject()["project"]["optional-dependencies"]["dev"]}
    assert {"ruff", "mypy", "import-linter", "pre-commit"} <= dev
    after_tests = ci.split('bash -euo pipefail -c "$cmd"', 1)[1]
    for line in ("ruff check tuner tests bench", "mypy tuner", "lint-imports"):
        assert re.search(rf"^{re.escape(line)}$", after_tests, re.M), f".ci/run does not run {line!r}"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = readme.split("<!-- test-command -->", 1)[1].split("<!-- /test-command -->", 1)[0]
    extras = re.search(r'pip install -e "\.\[([^\]]+)\]"', command)
    assert extras is not None and "dev" in extras.group(1).split(","), command
    hooks = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    for entry in ("entry: ruff check", "entry: mypy tuner", "entry: lint-imports"):
        assert entry in hooks


def test_mypy_config_has_no_module_wide_escape() -> None:
    """check_untyped_defs on, no ignore_errors anywhere, missing imports ignored only per named module."""
    mypy = _pyproject()["tool"]["mypy"]
    assert mypy["check_untyped_defs"] is True
    assert "ignore_errors" not in mypy and "ignore_missing_imports" not in mypy
    for override in mypy.get("overrides", []):
        assert "ignore_errors" not in override
        assert all(not m.startswith("tuner") for m in override["module"]), override


def test_every_bench_imports() -> None:
    """Each bench module imports against the code as it is (three did not after a module moved: nothing ran
    them between stops, so a bench owed to an issue failed only when it was finally run). Importing runs no
    bench: each one's work is under ``main()``."""
    import importlib

    bench = Path(__file__).resolve().parent.parent / "bench"
    names = sorted(p.stem for p in bench.glob("*.py") if p.stem != "__init__")
    assert len(names) > 10
    failed = {}
    for name in names:
        try:
            importlib.import_module(f"bench.{name}")
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert failed == {}
