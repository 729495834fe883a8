"""The shape of the code (issue 24 "Done when"): sizes, typed reads, no prose read back as data, contracts.

Each rule walks the source with ``ast`` and compares what it finds with an explicit list of today's known
exceptions. The lists are a shared to-do list: a change that fixes an entry deletes it in the same commit
(an entry that is no longer found fails the test, as does a new finding), and when issue 24 is done the
to-do lists are empty. Only :data:`OUTSIDE_TEXT_READS` stays: code that reads text another program wrote
(llama-server's log and ``--help``, ``/proc/cpuinfo``, a prompt file) must look for words in it.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TUNER = REPO / "tuner"

FUNC_MAX_LINES = 100
CLASS_MAX_LINES = 450
RUN_TUNE_MAX_LINES = 80


def _rel(path: Path, base: Path = REPO) -> str:
    return path.relative_to(base).as_posix()


@cache
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _modules(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield path, _parsed(path, path.stat().st_mtime_ns)


# ---- S1: sizes ------------------------------------------------------------------------------------------
def definitions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, int]]:
    """Every function and class in ``tree`` as ``(qualified name, node, lines)``; lines run from the first
    decorator to the last line of the body."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                assert child.end_lineno is not None
                yield prefix + child.name, child, child.end_lineno - start + 1
                stack.append((child, f"{prefix}{child.name}."))
            else:
                stack.append((child, prefix))


def oversized(root: Path, base: Path = REPO) -> set[tuple[str, str]]:
    """``(path relative to base, qualified name)`` of every function longer than :data:`FUNC_MAX_LINES` and
    class longer than :data:`CLASS_MAX_LINES` under ``root``."""
    found = set()
    for path, tree in _modules(root):
        for name, node, n in definitions(tree):
            if n > (CLASS_MAX_LINES if isinstance(node, ast.ClassDef) else FUNC_MAX_LINES):
                found.add((_rel(path, base), name))
    return found


ALLOWED_OVERSIZED: set[tuple[str, str]] = set()
"""Functions over 100 lines and classes over 450 lines: none are left (issue 24 split each)."""


def test_no_function_over_100_lines_and_no_class_over_450() -> None:
    found = oversized(TUNER)
    assert found == ALLOWED_OVERSIZED, {"new": sorted(found - ALLOWED_OVERSIZED),
                                        "gone (delete from the list)": sorted(ALLOWED_OVERSIZED - found)}


def test_run_tune_is_a_short_list_of_steps() -> None:
    found = [(_rel(p), n) for p, tree in _modules(TUNER / "calibration") for name, _node, n in definitions(tree)
             if name == "run_tune"]
    assert len(found) == 1, found
    assert found[0][1] < RUN_TUNE_MAX_LINES, found


# ---- S2: getattr with a default on the project's own typed objects --------------------------------------
def getattr_defaults(root: Path, base: Path = REPO) -> Counter[tuple[str, str]]:
    """``getattr(obj, "name", default)`` calls under ``root``, as ``(path, "obj.name")`` with their count."""
    found: Counter[tuple[str, str]] = Counter()
    for path, tree in _modules(root):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)):
                found[(_rel(path, base), f"{ast.unparse(node.args[0])}.{node.args[1].value}")] += 1
    return found


ALLOWED_GETATTR_DEFAULTS: Counter[tuple[str, str]] = Counter()
"""``getattr(x, "name", default)`` reads in tuner/calibration/: none are left; every ``x`` there is a project
type or a protocol the shared fake implements, read by its typed attribute (issue 24)."""


def test_no_getattr_with_a_default_in_calibration() -> None:
    found = getattr_defaults(TUNER / "calibration")
    assert found == ALLOWED_GETATTR_DEFAULTS, {
        "new": sorted((found - ALLOWED_GETATTR_DEFAULTS).elements()),
        "gone (delete from the list)": sorted((ALLOWED_GETATTR_DEFAULTS - found).elements())}


# ---- S3: the code reads its own prose back ------------------------------------------------------------
PROSE_NAMES = frozenset({"reason", "busy_note", "note", "notes", "error", "message", "memory_note", "label",
                         "line", "lines"})
"""Names that hold sentences: a test on one of them (``in``, ``startswith``, ``replace`` …) reads words as data."""
STRING_TESTS = frozenset({"startswith", "endswith", "replace", "partition", "rpartition", "split", "removeprefix",
                          "removesuffix"})
_SEE_THROUGH = frozenset({"lower", "upper", "casefold", "strip", "lstrip", "rstrip"})
_EXCEPTION_NAMES = frozenset({"exc", "e", "err"})


def _held(expr: ast.expr) -> tuple[str, str] | None:
    """Whose text ``expr`` is: ``x.reason.lower()`` → ``("attribute", "reason")``, ``(m.error or "")`` →
    ``("attribute", "error")``, ``str(exc)`` → ``("variable", "exc")``, ``line`` → ``("variable", "line")``;
    ``None`` for anything else."""
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SEE_THROUGH:
            expr = expr.func.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "str" and expr.args:
            expr = expr.args[0]
        elif isinstance(expr, ast.BoolOp):
            expr = expr.values[0]
        elif isinstance(expr, ast.Attribute):
            return "attribute", expr.attr
        elif isinstance(expr, ast.Name):
            return "variable", expr.id
        else:
            return None


def _holds_prose(expr: ast.expr, variables: set[str]) -> bool:
    """True when ``expr`` is the text of a prose attribute (:data:`PROSE_NAMES`) or of one of ``variables``
    (those names, and what the module binds from prose: loop variables, the parts of a split)."""
    held = _held(expr)
    return held is not None and held[1] in (PROSE_NAMES if held[0] == "attribute" else variables)


def _prose_reads(tree: ast.AST) -> list[str]:
    """Every read of prose in one module, as the source text of the expression."""
    names = set(PROSE_NAMES)
    for node in ast.walk(tree):  # what a loop over notes or lines binds holds prose too
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and _holds_prose(node.iter, names):
            names.add(node.target.id)

    def string_test(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in STRING_TESTS and _holds_prose(node.func.value, names))

    for node in ast.walk(tree):  # the parts of a split sentence are prose: `_, sep, rest = x.partition(…)`
        if isinstance(node, ast.Assign) and string_test(node.value):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(e.id for e in elts if isinstance(e, ast.Name))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                exception_text = (isinstance(right, ast.Call) and isinstance(right.func, ast.Name)
                                  and right.func.id == "str" and _holds_prose(right, set(_EXCEPTION_NAMES)))
                if isinstance(op, (ast.In, ast.NotIn)) and (_holds_prose(right, names) or exception_text):
                    out.append(ast.unparse(node))
        elif string_test(node):
            out.append(ast.unparse(node))
    return out


def prose_reads(root: Path, base: Path = REPO) -> Counter[tuple[str, str]]:
    """``(path, expression)`` of every prose read under ``root``, with its count."""
    return Counter((_rel(path, base), expr) for path, tree in _modules(root) for expr in _prose_reads(tree))


OWN_PROSE_READS = Counter({
    # the same pattern outside the decision
    ("tuner/ui/graphs.py", "' n_max ' in label"): 1,
    ("tuner/ui/graphs.py", "label.split(' ')"): 1,
    ("tuner/ui/graphs.py", "label.rpartition(' n_max ')"): 1,
    ("tuner/ui/graphs.py", "label.replace('draft-simple ', '')"): 1,
    # wrapping a bar's label into lines that fit the bar (layout: words split at spaces, no decision)
    ("tuner/ui/graphs.py", "rest.split(' ')"): 1,
    ("tuner/ui/graphs.py", "tail.partition(' ')"): 1,
    ("tuner/cli/catalog.py", "reason.lower().startswith('compatible:')"): 1,
    ("tuner/cli/catalog.py", "reason.split(':', 1)"): 1,
    ("tuner/cli/serve.py", "rpc_build_status(binary.path, dialect.has('--rpc')).message.removeprefix('RPC: ')"): 1,
    ("tuner/cli/serve.py", "message.startswith('--server')"): 1,
    ("tuner/cli/serve.py", "message.removeprefix(str(Path(server).expanduser().absolute()) + ': ')"): 1,
})
"""The project's own sentences tested or rewritten as data today; each goes when the fact behind it is a
field (issue 24)."""

OUTSIDE_TEXT_READS = Counter({
    # a prompt file, a .desktop file, /proc/cpuinfo
    ("tuner/calibration/prompts.py", "line.lstrip().startswith('{')"): 1,
    ("tuner/calibration/prompts.py", "line.startswith('#')"): 1,
    ("tuner/desktop.py", "line.startswith('#')"): 1,
    ("tuner/desktop.py", "line.startswith('[')"): 1,
    ("tuner/desktop.py", "line.endswith(']')"): 1,
    ("tuner/desktop.py", "'=' in line"): 1,
    ("tuner/desktop.py", "line.split('=', 1)"): 1,
    ("tuner/hardware/host.py", "line.startswith('flags')"): 1,
    ("tuner/hardware/host.py", "line.split(':', 1)"): 1,
    ("tuner/server/workarounds.py", "line.partition(':')"): 1,
    # /etc/os-release, /proc/self/cgroup
    ("tuner/app.py", "line.strip().partition('=')"): 1,
    ("tuner/app.py", "key.startswith('#')"): 1,
    ("tuner/server/oomcount.py", "line.startswith('0::')"): 1,
    # argparse's error lines
    ("tuner/cli/__init__.py", "line.startswith('draftwise')"): 1,
    ("tuner/cli/__init__.py", "line.startswith(prefix)"): 1,
    ("tuner/cli/__init__.py", "line.removeprefix('error:')"): 1,
    ("tuner/cli/__init__.py", "message.startswith(('unrecognized arguments', 'the following arguments are required'))"): 1,
    # llama-server's log, --help and --version, ggml-rpc-server's log, the SSE stream
    ("tuner/hardware/buffers.py", "'loading draft model' in line"): 1,
    ("tuner/hardware/buffers.py", "'device memory data for initial parameters' in line"): 1,
    ("tuner/hardware/buffers.py", "'device memory data for the extra model' in line"): 1,
    ("tuner/hardware/buffers.py", "'memory breakdown [MiB]' in line"): 1,
    ("tuner/hardware/buffers.py", "'|' not in line"): 1,
    ("tuner/crosscheck/fit_params.py", "line.split()"): 1,
    ("tuner/crosscheck/server_check.py", "'model loaded' in line"): 1,
    ("tuner/crosscheck/server_check.py", "'listening on' in line"): 1,
    ("tuner/crosscheck/server_check.py", "'exiting due to' in line"): 1,
    ("tuner/crosscheck/server_check.py", "k in ln"): 1,
    ("tuner/hardware/rpchost.py", "'transport' in line"): 1,
    ("tuner/rpcaddr.py", "'Remote RPC server crashed' in line"): 1,
    ("tuner/rpcaddr.py", "'RPC handshake failed' in line"): 1,
    ("tuner/server/client.py", "line.startswith('data:')"): 1,
    ("tuner/server/dialect.py", "line.startswith('-')"): 1,
    ("tuner/server/dialect.py", "line.split()"): 1,
    ("tuner/server/dialect.py", "line.startswith('-----')"): 1,
    ("tuner/server/dialect.py", "ln.startswith('-')"): 1,
    ("tuner/server/dialect.py", "ln.startswith('-----')"): 1,
    ("tuner/server/discovery.py", "line.strip().startswith('version')"): 1,
    ("tuner/server/diagnosis.py", "'llama_server: listening on' in line"): 1,
    ("tuner/server/diagnosis.py", "'llama_server: model loaded' in line"): 1,
    ("tuner/server/diagnosis.py", "'warming up the model' in line"): 1,
    ("tuner/server/diagnosis.py", "_WAKE_START in line"): 1,
    ("tuner/server/sleep.py", "ENTER_LINE in line"): 1,
    ("tuner/server/sleep.py", "EXIT_LINE in line"): 1,
    ("tuner/server/sleep.py", "TASK_LINE in line"): 1,
    ("tuner/ui/tab_serve.py", "ROUTER_PROXY_LINE not in line"): 1,
})
"""Reads of text another program or the user wrote: they stay (each is listed so a new one is looked at)."""


def test_no_code_reads_its_own_prose_back() -> None:
    found = prose_reads(TUNER)
    own = +OWN_PROSE_READS  # drops the zero entries
    assert found == own + OUTSIDE_TEXT_READS, {
        "new": sorted((found - own - OUTSIDE_TEXT_READS).elements()),
        "gone (delete from the list)": sorted(((own + OUTSIDE_TEXT_READS) - found).elements())}


def text_sentences(root: Path, base: Path = REPO) -> Counter[tuple[str, str]]:
    """Sentences that carry words built elsewhere: ``Sentence.text(…)`` made, ``….words()`` read back."""
    found: Counter[tuple[str, str]] = Counter()
    for path, tree in _modules(root):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                made = node.func.attr == "text" and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "Sentence"
                if made or (node.func.attr == "words" and not node.args):
                    found[(_rel(path, base), "Sentence.text" if made else "words()")] += 1
    return found


ALLOWED_TEXT_SENTENCES: Counter[tuple[str, str]] = Counter()
"""Sentences of kind ``text`` (words built before the sentence): none are left, each sentence has a kind of its
own with a renderer (issue 24)."""


def test_every_sentence_is_data() -> None:
    assert text_sentences(TUNER) == ALLOWED_TEXT_SENTENCES


# ---- the rules themselves -------------------------------------------------------------------------------
def test_the_rules_find_what_they_look_for(tmp_path: Path) -> None:
    """Each rule flags a planted example and passes a near miss (a rule that finds nothing is no rule)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNC_MAX_LINES))
    (pkg / "m.py").write_text(
        f"def long():\n{body}\n\n\ndef short():\n    return 1\n\n\n"
        "class C:\n    def m(self, d, dec):\n"
        "        a = getattr(d, 'devices', ())\n"
        "        b = getattr(d, 'devices')\n"
        "        if 'faster' in dec.reason or 'x' in names:\n"
        "            return dec.reason.lower().startswith('no')\n"
        "        for n in d.notes:\n"
        "            if n.startswith('RPC'):\n"
        "                return a, b\n"
        "        _, sep, rest = (d.error or '').partition(' never ')\n"
        "        return rest.replace('a', 'b'), 'gone' in str(exc), 'x' in str(value)\n"
        "    def o(self, line, p):\n"
        "        key, _, val = line.partition(':')\n"
        "        return 'ggml' in p.name, 'x' in key\n"
        "    def n(self, s):\n"
        "        return Sentence.text(1, 'a'), s.words(), Sentence(1, 'k', {}), s.words\n",
        encoding="utf-8")
    assert oversized(pkg, tmp_path) == {("pkg/m.py", "long")}
    assert getattr_defaults(pkg, tmp_path) == Counter({("pkg/m.py", "d.devices"): 1})
    assert set(prose_reads(pkg, tmp_path)) == {("pkg/m.py", expr) for expr in (
        "'faster' in dec.reason", "dec.reason.lower().startswith('no')", "n.startswith('RPC')",
        "(d.error or '').partition(' never ')", "rest.replace('a', 'b')", "'gone' in str(exc)",
        "line.partition(':')", "'x' in key")}
    assert text_sentences(pkg, tmp_path) == Counter({("pkg/m.py", "Sentence.text"): 1, ("pkg/m.py", "words()"): 1})


# ---- the import contracts of pyproject.toml -------------------------------------------------------------
def test_the_new_contracts_catch_a_circle_a_face_bypass_and_hardware_running_the_server(tmp_path: Path) -> None:
    """One copy of the package with four planted imports: a circle, the UI past a package face, hardware
    importing server, and the neutral rpcaddr importing the settings above it: lint-imports names each."""
    from tests.test_tooling import LINT_IMPORTS, _copy_tree, _lint_imports

    if LINT_IMPORTS is None:
        pytest.skip("lint-imports (import-linter) not installed")
    root = _copy_tree(tmp_path)
    planted = {
        "calibration/prompts.py": "from tuner.calibration import workload",
        "ui/window.py": "from tuner.calibration.decide import decide",
        "hardware/sysfs.py": "from tuner.server import client",
        "rpcaddr.py": "from tuner import settings",
    }
    for rel, line in planted.items():
        path = root / "tuner" / rel
        path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {line}  # noqa\n",
                        encoding="utf-8")
    run = _lint_imports(root)
    assert run.returncode == 1, run.stdout + run.stderr
    for expected in ("No cycles are allowed in tuner.calibration",
                     "tuner.ui.window -> tuner.calibration.decide",
                     "tuner.hardware is not allowed to import tuner.server",
                     "tuner.rpcaddr is not allowed to import tuner.settings"):
        assert expected in run.stdout, (expected, run.stdout)


# ---- the package faces the UI imports from ---------------------------------------------------------------
FACES = ("tuner.calibration", "tuner.catalog", "tuner.crosscheck", "tuner.hardware", "tuner.profiles",
         "tuner.server", "tuner.telemetry")
#: face -> the modules it loads only when one of their names is first asked for (start-up import time)
LAZY = {"tuner.catalog": ("tuner.catalog.folder", "tuner.catalog.demo", "tuner.catalog.families"),
        "tuner.crosscheck": ("tuner.crosscheck.build", "tuner.crosscheck.lines", "tuner.crosscheck.cpu_buffers"),
        "tuner.hardware": ("tuner.hardware.memory",),
        "tuner.telemetry": ("tuner.telemetry.collector", "tuner.telemetry.watch", "tuner.telemetry.samplers")}


def test_every_name_a_face_exports_resolves_and_lazy_faces_load_nothing_early() -> None:
    """Each name in a face's ``__all__`` resolves (a stale entry of a lazy map would only fail when the GUI
    first uses it), and importing a lazy face loads none of its lazy modules (a fresh interpreter)."""
    import importlib
    import subprocess
    import sys

    for face in FACES:
        module = importlib.import_module(face)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, (face, missing)
    code = ("import sys, importlib; before = set(sys.modules); "
            f"lazy = {LAZY!r}; early = []\n"
            "for face, mods in lazy.items():\n"
            "    importlib.import_module(face); early += [m for m in mods if m in sys.modules and m not in before]\n"
            "print(early)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout


if __name__ == "__main__":  # `python -m tests.test_structure`: today's findings, to update the lists by hand
    print("oversized:", *sorted(oversized(TUNER)), sep="\n  ")
    for title, counts in (("getattr defaults:", getattr_defaults(TUNER / "calibration")),
                          ("prose reads:", prose_reads(TUNER)), ("text sentences:", text_sentences(TUNER))):
        print(title, *(f"{k!r}: {v}," for k, v in sorted(counts.items())), sep="\n  ")
