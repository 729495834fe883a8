"""Which target a draft head (EAGLE-3, DFlash/DSpark, Gemma 4 assistant, MTP head) was made for.

A draft head is not a stand-alone model: llama-server feeds it the target's hidden states (EAGLE-3,
DFlash) or the target's last hidden state and KV (MTP heads, ``gemma4-assistant``), and exchanges
token ids with the target directly (no translation). So a head works only with a target whose
shapes match the ones it was trained against. The rules below are the checks llama.cpp b11434
makes (or the shapes it assumes without checking, where a mismatch aborts or corrupts memory);
each has a short ``rule`` id, shown to the user when it fails, like the draft rules of
:mod:`tuner.catalog.compat`. They read header keys and tensor shapes only, never the file name.

EAGLE-3 (``general.architecture = eagle3``):

- ``target-layers-count``: ``eagle3.target_layers`` lists exactly 3 layer ids
  (src/models/eagle3.cpp ``llama_model_eagle3::load_arch_hparams``; common/speculative.cpp
  ``common_speculative_impl_draft_eagle3`` throws "expected 3 extract layers").
- ``target-layer-range``: every id is at most the target's layer count (the constructor aborts
  with "target layer id exceeds target n_layer"; an id equal to it means the target's final
  hidden state).
- ``target-hidden-size``: ``eagle3.target_hidden_size`` equals the target's ``embedding_length``,
  and ``fc.weight`` is ``3 × target_hidden_size`` wide (the loader sizes ``fc`` from the key,
  while the speculator concatenates ``3 × llama_model_n_embd(target)`` floats per token).
- ``shared-embedding-width``: a head without its own ``token_embd`` / ``output`` borrows the
  target's (eagle3.cpp decoder graph, ``ctx_other``), so its ``embedding_length`` must equal the
  target's.
- ``vocabulary``: the head's token ids are the target's: its own ``token_embd`` rows, and its
  tokenizer when it carries one, must have the target's vocabulary size (and the same token
  texts: equal fingerprints).

DFlash / DSpark (``general.architecture = dflash``; DSpark has tensor ``markov_w1.weight``):
``target-layers-count`` (``dflash.target_layers`` non-empty: speculative.cpp
``common_speculative_impl_draft_dflash`` asserts), ``target-layer-range``, ``target-hidden-size``
(src/models/dflash.cpp sizes the encoder input ``n_ids × head n_embd`` while the speculator feeds
``n_ids × target n_embd``, so the two widths must be equal), ``vocabulary``.

Gemma 4 assistant (``gemma4-assistant``): ``target-architecture`` (it shares the target's KV cache:
speculative.cpp ``is_mem_shared``, so the target must be ``gemma4``), ``target-hidden-size``
(``gemma4-assistant.embedding_length_out`` carries the target's hidden size:
src/models/gemma4-assistant.cpp ``load_arch_tensors``), ``vocabulary``.

MTP head (a file whose every block is a ``blk.N.nextn.*`` block): ``target-architecture`` (the
same ``general.architecture``: the MTP graph is the target architecture's
``LLM_GRAPH_TYPE_DECODER_MTP`` branch), ``target-hidden-size`` (equal ``embedding_length``: it
reads the target's last hidden state), ``vocabulary``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.header import GGUFError, GGUFHeader, read_header
from tuner.catalog.model import KIND_DRAFT_HEAD, ModelFile

#: Head speculation types (``ModelFile.detail["spec_type"]`` of a draft head).
HEAD_SPEC_TYPES = ("draft-eagle3", "draft-dflash", "draft-dspark", "draft-mtp")


@dataclass(frozen=True)
class HeadFacts:
    """What a draft head file says about the target it was made for (from its header).

    Attributes:
        spec_type: ``draft-eagle3``, ``draft-dflash``, ``draft-dspark`` or ``draft-mtp``.
        architecture: the head's ``general.architecture``.
        n_embd: the head's own ``embedding_length`` (hidden width), None when absent.
        target_layers: ``<arch>.target_layers`` (EAGLE-3 / DFlash), ``()`` when absent.
        target_hidden_size: the target width the head expects (``eagle3.target_hidden_size``,
            ``gemma4-assistant.embedding_length_out``; for DFlash and MTP heads their own
            ``embedding_length``), None when unknown.
        fc_in: input width of ``fc.weight`` (``ne[0]``), None when the tensor is absent.
        own_embd_vocab: rows of the head's own ``token_embd.weight`` (``ne[1]``), None without one.
        own_output: True when the head has its own ``output.weight``.
        n_vocab: size of the head's tokenizer, None when it has none.
        fingerprint: tokenizer fingerprint, None when it has no tokenizer.
    """

    spec_type: str
    architecture: str
    n_embd: int | None
    target_layers: tuple[int, ...]
    target_hidden_size: int | None
    fc_in: int | None
    own_embd_vocab: int | None
    own_output: bool
    n_vocab: int | None
    fingerprint: str | None


@dataclass(frozen=True)
class HeadVerdict:
    """Whether a head can serve a target: ``rule`` is the failed rule id (None when it matches);
    ``message`` is a plain sentence naming the keys/tensors and their values."""

    matches: bool
    rule: str | None
    message: str


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def head_facts(head: ModelFile, header: GGUFHeader | None = None) -> HeadFacts:
    """Read the target-facing facts of a ``draft-head`` row (its header is read again unless given).

    Raises:
        ValueError: ``head`` is not of kind ``draft-head``.
        GGUFError: the file cannot be read any more.
    """
    if head.kind != KIND_DRAFT_HEAD:
        raise ValueError(f"{head.path}: kind {head.kind!r} is not a draft head")
    hdr = header if header is not None else read_header(head.path)
    arch = head.architecture or hdr.architecture or ""
    spec = dict(head.detail).get("spec_type", "draft-mtp")
    kv = hdr.kv
    tensors = {t.name: t for t in hdr.tensors}
    layers_raw = kv.get(f"{arch}.target_layers")
    if isinstance(layers_raw, tuple):
        layers = tuple(int(x) for x in layers_raw)
    else:
        layers = ()
    n_embd = _int(kv.get(f"{arch}.embedding_length"))
    if arch == "eagle3":
        tgt = _int(kv.get("eagle3.target_hidden_size"))
    elif arch == "gemma4-assistant":
        tgt = _int(kv.get("gemma4-assistant.embedding_length_out"))
    else:
        tgt = n_embd
    fc = tensors.get("fc.weight")
    embd = tensors.get("token_embd.weight")
    tok = head.tokenizer
    return HeadFacts(
        spec_type=spec,
        architecture=arch,
        n_embd=n_embd,
        target_layers=layers,
        target_hidden_size=tgt,
        fc_in=fc.shape[0] if fc is not None and fc.shape else None,
        own_embd_vocab=embd.shape[1] if embd is not None and len(embd.shape) > 1 else None,
        own_output="output.weight" in tensors,
        n_vocab=tok.n_tokens if tok else None,
        fingerprint=tok.fingerprint if tok else None,
    )


def _target_layer_count(target: ModelFile) -> int | None:
    if target.n_layers is None:
        return None
    return target.n_layers - (target.mtp_layers or 0)


def check_head(target: ModelFile, head: ModelFile, facts: HeadFacts | None = None) -> HeadVerdict:
    """Can ``head`` (a ``draft-head`` row) draft for ``target`` (an ``llm`` row)?

    Applies the rules of the module docstring in order and returns the first failure, else a
    matching verdict. Never raises for a mismatch; a head whose file cannot be read any more gives
    a non-matching verdict with rule ``unreadable``.
    """
    try:
        f = facts or head_facts(head)
    except (GGUFError, OSError) as exc:
        return HeadVerdict(False, "unreadable", f"cannot read the head {head.path.name}: {exc}")
    tname = target.path.name
    t_embd = target.n_embd
    t_vocab = target.tokenizer.n_tokens if target.tokenizer else None
    layer_count = _target_layer_count(target)

    def no(rule: str, msg: str) -> HeadVerdict:
        return HeadVerdict(False, rule, msg)

    if f.architecture in ("eagle3", "dflash"):
        key = f"{f.architecture}.target_layers"
        if f.architecture == "eagle3" and len(f.target_layers) != 3:
            return no("target-layers-count", f"{key} lists {len(f.target_layers)} layer ids; EAGLE-3 needs exactly 3")
        if not f.target_layers:
            return no("target-layers-count", f"{key} is missing or empty; DFlash needs the target layer ids")
        if layer_count is not None:
            bad = [i for i in f.target_layers if i < 0 or i > layer_count]
            if bad:
                return no(
                    "target-layer-range",
                    f"{key} = {list(f.target_layers)} refers to layer {bad[0]}, but {tname} has {layer_count} layers",
                )
    if f.architecture == "gemma4-assistant" and target.architecture != "gemma4":
        return no("target-architecture",
                  f"a gemma4-assistant head shares its target's KV cache and needs a gemma4 target; {tname} is "
                  f"{target.architecture}")
    if f.spec_type == "draft-mtp" and f.architecture != "gemma4-assistant" and f.architecture != target.architecture:
        return no("target-architecture",
                  f"an MTP head runs its target architecture's MTP graph: the head is {f.architecture}, "
                  f"{tname} is {target.architecture}")
    if t_embd is not None and f.target_hidden_size is not None and f.target_hidden_size != t_embd:
        key = {"eagle3": "eagle3.target_hidden_size", "gemma4-assistant": "gemma4-assistant.embedding_length_out"}.get(
            f.architecture, f"{f.architecture}.embedding_length")
        return no("target-hidden-size", f"{key} = {f.target_hidden_size}, but {tname} is {t_embd} wide")
    if f.architecture == "eagle3" and t_embd is not None and f.fc_in is not None and f.fc_in != 3 * t_embd:
        return no("target-hidden-size",
                  f"fc.weight takes {f.fc_in} inputs; the speculator feeds 3 x {t_embd} = {3 * t_embd} from {tname}")
    if f.architecture == "eagle3" and t_embd is not None and f.n_embd is not None and f.n_embd != t_embd:
        if f.own_embd_vocab is None or not f.own_output:
            missing = "token_embd" if f.own_embd_vocab is None else "output"
            return no("shared-embedding-width",
                      f"the head has no {missing}.weight of its own and borrows {tname}'s, which is {t_embd} wide; "
                      f"the head is {f.n_embd} wide (eagle3.embedding_length)")
    if t_vocab is not None:
        if f.own_embd_vocab is not None and f.own_embd_vocab != t_vocab:
            return no("vocabulary", f"token_embd.weight has {f.own_embd_vocab} rows, {tname} has {t_vocab} tokens")
        if f.n_vocab is not None and f.n_vocab != t_vocab:
            return no("vocabulary", f"the head's tokenizer has {f.n_vocab} tokens, {tname} has {t_vocab}")
        tfp = target.tokenizer.fingerprint if target.tokenizer else None
        if f.fingerprint is not None and tfp is not None and f.fingerprint != tfp:
            return no("vocabulary", f"the head's token texts differ from {tname}'s (tokenizer fingerprints differ); "
                      "llama-server exchanges token ids without translation")
    what = {"draft-eagle3": "EAGLE-3 head", "draft-dflash": "DFlash head", "draft-dspark": "DSpark head",
            "draft-mtp": "MTP head"}.get(f.spec_type, "head")
    layers = f" (target layers {list(f.target_layers)})" if f.target_layers else ""
    return HeadVerdict(True, None, f"{what} for a {t_embd}-wide, {t_vocab}-token target{layers}")
