"""The demo folder: the bundled stories260K and a generated target + draft pair that shows speculation.

stories260K (``resources/demo``) is a real model, but it has no draft, and n-gram speculation never drafts
on it at sampled settings, so a tune on it always ends in "no speculation". The generated pair is built
like the tests' acceptance-dial family (:mod:`tuner.catalog.synthetic`): a target whose blocks past the
first ``draft_layers`` are scaled by ``eps``, and a draft made of the same first blocks. Its weights are
chosen so the draft agrees often *at llama-server's default sampling* (declared once in ``tuner.options``),
not only greedily:

- ``output_scale`` makes the next-token distribution sharp (logits spread widely), so a sampled token is
  nearly always the greedy one, which the draft predicts; llama-server accepts a drafted token when the
  target's own sampled token equals it (common/sampling.cpp ``common_sampler_sample_and_accept_n``);
- a small ``embd_std`` lets attention over the context move the residual stream, so the near-greedy
  text does not fall into a short loop (a loop would let n-gram speculation win instead of the draft);
- ``eps`` sets how often the draft's greedy token is the target's.

The text of both models is noise; their speedup is real. Files are written deterministically (the same
recipe gives the same bytes), to a temporary name first and moved into place when complete. The folder
is generated on first use into ``paths.data_dir() / "demo"`` (``resources/`` may be read-only in a wheel
or bundle) and by ``draftwise demo DIR``. The pair's tokenizer is stories260K's with
``add_bos_token = false``, so llama.cpp's draft-compatibility rule ``bos`` (common/speculative.cpp
``common_speculative_are_compatible``) keeps the bundled model out of the pair's family: each stays
usable as a target of its own.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tuner import paths
from tuner.catalog import synthetic
from tuner.catalog.header import GGUFError, read_header
from tuner.errors import Cancelled, DraftwiseError
from tuner.resources import resource_path

#: What the demo pair is, in the words the UI and the files use.
DEMO_LABEL = "generated demo models: their text is noise, their speedup is real"
TARGET_FILE = "generated-demo-target.gguf"
DRAFT_FILE = "generated-demo-draft.gguf"
BUNDLED_FILE = "stories260K.gguf"
#: Key written into both generated files: the recipe they were made from (a changed recipe regenerates).
RECIPE_KEY = "draftwise.demo.recipe"
#: Free space kept on top of the files' size before generating.
SPACE_MARGIN_BYTES = 64 * 1024 * 1024


class DemoError(DraftwiseError, OSError):
    """The demo folder cannot be written (names the folder and why); ``bad_input`` when the path given is
    not a folder."""

    def __init__(self, message: str, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


@dataclass(frozen=True)
class DemoRecipe:
    """How the generated pair is made.

    Fields: ``n_embd``, ``n_layers`` (the target; F16 weights), ``draft_layers`` (the draft's blocks, the
    target's first ones), ``eps`` (scale of the target's later blocks: the agreement dial), ``output_scale``
    (sharpness of the next-token distribution), ``embd_std`` (token embedding scale), ``seed``, ``version``
    (bumped when the generator changes what it writes).
    """

    n_embd: int = 768
    n_layers: int = 12
    draft_layers: int = 1
    eps: float = 0.005
    output_scale: float = 50.0
    embd_std: float = 0.5
    seed: int = 26
    version: int = 1

    @property
    def tag(self) -> str:
        """The recipe as one string (written under :data:`RECIPE_KEY`)."""
        return (f"v{self.version} n_embd {self.n_embd} blocks {self.n_layers}/{self.draft_layers} eps {self.eps:g} "
                f"output_scale {self.output_scale:g} embd_std {self.embd_std:g} seed {self.seed}")

    def shape(self, draft: bool) -> synthetic.LlamaShape:
        """The target's (``draft`` False) or the draft's Llama shape."""
        common = dict(n_embd=self.n_embd, n_head=4, n_head_kv=2, dtype="f16", seed=self.seed,
                      output_scale=self.output_scale, embd_std=self.embd_std)
        if draft:
            return synthetic.LlamaShape(n_layers=self.draft_layers, **common)  # type: ignore[arg-type]
        return synthetic.LlamaShape(n_layers=self.n_layers, eps=self.eps, keep_blocks=self.draft_layers,
                                    **common)  # type: ignore[arg-type]


#: The recipe of the app's demo pair (target 164 MiB, draft 15 MiB). Measured on llama-server b11434 at the
#: default sampling, 4 prompts x 128 tokens, --spec-draft-n-max 8: 88 % of the drafted tokens accepted
#: (greedy: 83 %); on two long-context prompts of 900 tokens 85 % and 94 %; ngram-mod and ngram-simple drafted
#: nothing (the text does not repeat). With embd_std 0.7 / 2.0 the text fell into loops (ngram-mod then
#: beat the draft: 3.1x); with output_scale 30 / 10 acceptance at the default sampling fell to 0.78 / 0.69.
DEMO_RECIPE = DemoRecipe()


@dataclass(frozen=True)
class DemoProgress:
    """How far the generation is: ``done_bytes`` of ``total_bytes`` (both files), now writing ``file_name``."""

    done_bytes: int
    total_bytes: int
    file_name: str

    @property
    def fraction(self) -> float:
        """0..1."""
        return self.done_bytes / self.total_bytes if self.total_bytes else 1.0


@dataclass(frozen=True)
class DemoFolder:
    """A written demo folder: its path, the bundled model, the generated target and draft, and whether
    this call generated the pair (False: an up-to-date pair was already there)."""

    folder: Path
    bundled: Path
    target: Path
    draft: Path
    generated: bool


def demo_folder() -> Path:
    """Where the app keeps its demo folder: ``paths.data_dir() / "demo"`` (not created)."""
    return paths.data_dir() / "demo"


def is_generated_demo(path: str | Path) -> bool:
    """Whether ``path`` is one of the generated demo files (by its file name)."""
    return Path(path).name in (TARGET_FILE, DRAFT_FILE)


def demo_tokenizer() -> synthetic.TokenizerSpec:
    """stories260K's tokenizer (read from the bundled file) with ``add_bos_token`` false.

    Raises:
        FileNotFoundError: the bundled stories260K.gguf is missing.
    """
    bundled = resource_path("demo", BUNDLED_FILE)
    if not bundled.is_file():
        raise FileNotFoundError(f"the bundled demo model is missing: {bundled}")
    return replace(synthetic.read_tokenizer(bundled), add_bos=False)


def is_current(path: Path, recipe: DemoRecipe) -> bool:
    """Whether ``path`` is a complete generated file of ``recipe`` (its :data:`RECIPE_KEY` matches and the
    file holds every tensor its header lists). Never raises: an unreadable file is not current."""
    try:
        h = read_header(path)
    except (GGUFError, OSError):
        return False
    if h.kv.get(RECIPE_KEY) != recipe.tag:
        return False
    end = max((t.offset_bytes + (t.n_bytes or 0) for t in h.tensors), default=0)
    return bool(h.tensors) and end <= h.file_size_bytes


def _description(draft: bool) -> str:
    role = ("the draft: the target's first blocks, so it predicts the target's next token most of the time"
            if draft else "the target: a random Llama whose later blocks are scaled down, so its own first "
            "blocks (the draft) predict it")
    return f"Draftwise {DEMO_LABEL}. This is {role}. Made by Draftwise from a fixed recipe; no training data."


def _write_one(folder: Path, draft: bool, recipe: DemoRecipe, on_bytes: synthetic.Progress) -> Path:
    final = folder / (DRAFT_FILE if draft else TARGET_FILE)
    tmp = folder / f".{final.name}.part"
    name = f"Generated demo {'draft' if draft else 'target'} (text is noise, speedup is real)"
    try:
        synthetic.write_llama_gguf(tmp, recipe.shape(draft), demo_tokenizer(), general_name=name,
                                   extra_kv={"general.description": _description(draft), RECIPE_KEY: recipe.tag},
                                   progress=on_bytes)
        synthetic.replace_file(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed + SPACE_MARGIN_BYTES:
        mib = 1024 * 1024
        raise DemoError(f"{folder}: not enough free space for the demo models "
                        f"({(needed + SPACE_MARGIN_BYTES) // mib} MiB needed, {free // mib} MiB free)")


def _copy_bundled(folder: Path) -> Path:
    src, dst = resource_path("demo", BUNDLED_FILE), folder / BUNDLED_FILE
    if not src.is_file():
        raise DemoError(f"the bundled demo model is missing: {src}")
    if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
        tmp = folder / f".{BUNDLED_FILE}.part"
        shutil.copyfile(src, tmp)
        synthetic.replace_file(tmp, dst)
    return dst


def write_demo_folder(folder: Path | None = None, recipe: DemoRecipe | None = None,
                      progress: Callable[[DemoProgress], None] | None = None,
                      cancel: threading.Event | None = None) -> DemoFolder:
    """Write the demo folder: a copy of the bundled stories260K and the generated target + draft.

    Files already there and current (:func:`is_current`) are kept, so a second call is quick; other files
    in the folder are left alone. Writing 200 MB takes some seconds on a laptop.

    Args:
        folder: where (created; default :func:`demo_folder`).
        recipe: the pair's recipe (default :data:`DEMO_RECIPE`, read at call time).
        progress: called with a :class:`DemoProgress` after each tensor written.
        cancel: when set, the generation stops between two tensors (the partial file is removed).

    Returns:
        A :class:`DemoFolder`.

    Raises:
        DemoError: ``folder`` is not a folder, cannot be created, lacks the space, or the bundled model is missing.
        tuner.errors.Cancelled: ``cancel`` was set.
    """
    folder = Path(folder) if folder is not None else demo_folder()
    recipe = recipe or DEMO_RECIPE
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise DemoError(f"{folder}: not a folder ({exc.strerror})", bad_input=True) from exc
    except OSError as exc:
        raise DemoError(f"{folder}: cannot create the demo folder ({exc.strerror or exc})") from exc
    bundled = _copy_bundled(folder)
    todo = [d for d in (False, True) if not is_current(folder / (DRAFT_FILE if d else TARGET_FILE), recipe)]
    tok = demo_tokenizer()
    sizes = {d: synthetic.llama_file_bytes(recipe.shape(d), tok) for d in todo}
    if todo:
        _check_space(folder, sum(sizes.values()))
    total, before = sum(sizes.values()), 0
    for d in todo:
        name = DRAFT_FILE if d else TARGET_FILE

        def on_bytes(done: int, _total: int, base: int = before, name: str = name) -> None:
            if cancel is not None and cancel.is_set():
                raise Cancelled("demo generation cancelled")
            if progress is not None:
                progress(DemoProgress(base + done, total, name))

        _write_one(folder, d, recipe, on_bytes)
        before += sizes[d]
    return DemoFolder(folder=folder, bundled=bundled, target=folder / TARGET_FILE, draft=folder / DRAFT_FILE,
                      generated=bool(todo))
