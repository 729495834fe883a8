"""docs/architecture.md names only modules that exist: every ``tuner/...py`` path and folder, and every
dotted ``tuner.x.y`` name (a package, a module, or a name defined at the top of that module)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PATH_RE = re.compile(r"\btuner/[A-Za-z0-9_/]*(?:\.py|/)")
DOTTED_RE = re.compile(r"\btuner(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


@cache
def _top_level_names(module: Path) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _dotted_exists(name: str) -> bool:
    """``tuner.a.b.C``: walk packages, then modules; the first part after a module must be defined in it."""
    parts = name.split(".")
    here = REPO / parts[0]
    for i, part in enumerate(parts[1:], 1):
        if (here / part).is_dir() and (here / part / "__init__.py").is_file():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            rest = parts[i + 1:]
            return not rest or rest[0] in _top_level_names(here / f"{part}.py")
        return part in _top_level_names(here / "__init__.py")  # a name the package exports
    return True


def test_every_module_the_architecture_doc_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = set(PATH_RE.findall(text))
    dotted = set(DOTTED_RE.findall(text))
    assert len(paths) > 30 and len(dotted) > 3, "the doc names modules; the patterns must find them"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    missing += sorted(d for d in dotted if not _dotted_exists(d))
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_every_bare_module_name_exists_in_its_sections_package() -> None:
    """Inside ``## catalog (`tuner/catalog/`)`` a bullet may name ``header.py`` alone: it must be there."""
    text = DOC.read_text(encoding="utf-8")
    checked = 0
    missing = []
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = section.partition("\n")
        packages = re.findall(r"`(tuner/[a-z_]+/)`", heading)
        if not packages:
            continue
        for bare in re.findall(r"(?:^- |, |and |\(|^  )`([a-z_]+\.py)`", body, flags=re.MULTILINE):
            checked += 1
            if not any((REPO / pkg / bare).is_file() for pkg in packages):
                missing.append(f"{heading.strip()}: {bare}")
    assert checked > 15 and not missing, missing


def test_the_check_catches_a_module_that_does_not_exist() -> None:
    assert _dotted_exists("tuner.spectypes.NGRAM_TYPES") and _dotted_exists("tuner.calibration")
    assert not _dotted_exists("tuner.server.command") and not _dotted_exists("tuner.server.config.NO_SUCH_NAME")
    assert not (REPO / "tuner/server/command.py").exists()


def test_every_package_and_cli_module_is_in_the_doc() -> None:
    """The doc covers the tree: each package of tuner/ and each command module has its entry."""
    text = DOC.read_text(encoding="utf-8")
    for pkg in sorted(p.name for p in (REPO / "tuner").iterdir() if (p / "__init__.py").is_file()):
        assert f"tuner/{pkg}/" in text, f"package tuner/{pkg}/ is not described"
    for mod in sorted((REPO / "tuner" / "cli").glob("*.py")):
        if mod.name not in ("__main__.py",):
            assert f"tuner/cli/{mod.name}" in text, f"tuner/cli/{mod.name} is not described"
    for mod in sorted((REPO / "tuner").glob("*.py")):
        if mod.name not in ("__init__.py", "__main__.py"):
            assert f"tuner/{mod.name}" in text, f"the neutral module tuner/{mod.name} is not described"
