"""docs/architecture.md and docs/DESIGN.md name only what exists: every ``tuner/...py`` path and folder, every
dotted ``tuner.x.y`` name (a package, a module, or a name defined at the top of that module), every other path
of the repository in backticks (``tests/...``, ``bench/...``), every ``draftwise COMMAND --flag`` in backticks,
and every function or module-level name in backticks (``plan_memory(...)``, ``budget.HARD_LIMIT``)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
DESIGN = REPO / "docs" / "DESIGN.md"
DOCS = (DOC, DESIGN)
SPAN_RE = re.compile(r"`([^`\n]+)`")
REPO_PATH_RE = re.compile(r"(?:tests|bench|packaging|resources|docs|\.ci)/[\w./-]*")
COMMAND_RE = re.compile(r"draftwise ([a-z][a-z-]*)((?: [^ ]+)*)")
CALL_RE = re.compile(r"((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)\(")
MODULE_NAME_RE = re.compile(r"([a-z_][a-z0-9_]*)\.([A-Z][A-Za-z0-9_]*)")  # module.CONSTANT / module.Class
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


def test_every_module_the_docs_name_exists() -> None:
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        paths = set(PATH_RE.findall(text))
        dotted = set(DOTTED_RE.findall(text))
        if doc == DOC:
            assert len(paths) > 30 and len(dotted) > 3, "the doc names modules; the patterns must find them"
        missing = sorted(p for p in paths if not (REPO / p).exists())
        missing += sorted(d for d in dotted if not _dotted_exists(d))
        assert not missing, f"{doc.name} names what does not exist: {missing}"


def _spans(doc: Path) -> list[str]:
    return SPAN_RE.findall(doc.read_text(encoding="utf-8"))


def _repo_path_missing(span: str) -> bool:
    m = REPO_PATH_RE.match(span)
    return m is not None and not (REPO / m.group(0).rstrip(".")).exists()


@cache
def _commands() -> dict[str, frozenset[str]]:
    """``draftwise``'s sub-commands and the option strings each one takes."""
    import argparse

    from tuner.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: frozenset(p._option_string_actions) | frozenset(parser._option_string_actions)
            for name, p in sub.choices.items()}


def _command_missing(span: str) -> str | None:
    """What a ``draftwise COMMAND ...`` span names that the parser does not have (None: all there)."""
    m = COMMAND_RE.fullmatch(span)
    if m is None:
        return None
    options = _commands().get(m.group(1))
    if options is None:
        return m.group(1)
    flags = [w.split("=")[0].strip("[]") for w in m.group(2).split() if w.lstrip("[").startswith("--")]
    wrong = [f for f in flags if f not in options]
    return " ".join(wrong) or None


@cache
def _project_names() -> tuple[frozenset[str], dict[str, tuple[Path, ...]]]:
    """Every function and class defined anywhere in tuner/, and each module or package name's files."""
    defs: set[str] = set()
    files: dict[str, list[Path]] = {}
    for path in (REPO / "tuner").rglob("*.py"):
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        files.setdefault(stem, []).append(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs.add(node.name)
    return frozenset(defs), {k: tuple(v) for k, v in files.items()}


def _name_missing(span: str) -> bool:
    """A call ``f(...)`` / ``mod.f(...)`` whose function is defined nowhere in tuner/, or ``mod.NAME`` that
    the module (a file or package of tuner/ with that name) does not define. Names under an outside module
    (``logging.getLogger(...)``) and builtins are not the project's and pass."""
    import builtins

    defs, files = _project_names()
    call = CALL_RE.match(span)
    if call is not None:
        first = call.group(1).split(".")[0]
        if (first and first not in files) or (not first and hasattr(builtins, call.group(2))):
            return False
        return call.group(2) not in defs
    named = MODULE_NAME_RE.fullmatch(span)
    if named is None or named.group(1) not in files:
        return False
    return not any(named.group(2) in _top_level_names(f) for f in files[named.group(1)])


def test_every_path_command_and_name_in_backticks_exists() -> None:
    """Each doc's backticked repository paths, ``draftwise`` commands with their flags, function calls and
    ``module.NAME`` references resolve against the tree and the real argument parser."""
    counts = {"paths": 0, "commands": 0, "names": 0}
    for doc in DOCS:
        spans = _spans(doc)
        counts["paths"] += sum(1 for s in spans if REPO_PATH_RE.match(s))
        counts["commands"] += sum(1 for s in spans if COMMAND_RE.fullmatch(s))
        counts["names"] += sum(1 for s in spans if CALL_RE.match(s) or MODULE_NAME_RE.fullmatch(s))
        missing = [s for s in spans if _repo_path_missing(s)]
        missing += [f"{s} ({_command_missing(s)})" for s in spans if _command_missing(s)]
        missing += [s for s in spans if _name_missing(s)]
        assert not missing, f"{doc.name} names what does not exist: {missing}"
    assert counts["paths"] > 10 and counts["commands"] > 10 and counts["names"] > 50, counts


def test_the_backtick_checks_catch_what_does_not_exist() -> None:
    assert _repo_path_missing("bench/no_such_bench.py") and not _repo_path_missing("tests/test_structure.py")
    assert _command_missing("draftwise status") == "status"
    assert _command_missing("draftwise tune --no-such-flag") == "--no-such-flag"
    assert _command_missing("draftwise tune --models DIR [--budget S]") is None
    assert _name_missing("no_such_function(x)") and _name_missing("budget.NO_SUCH_LIMIT")
    assert _name_missing("search.Budgett") and _name_missing("wording.NO_SUCH_RENDERER")
    assert not _name_missing("plan_memory(request, devices)") and not _name_missing("budget.HARD_LIMIT")
    assert not _name_missing("logging.getLogger(__name__)") and not _name_missing("max(a, b)")


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
