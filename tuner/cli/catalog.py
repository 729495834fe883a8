"""CLI: ``draftwise scan DIR [--json]`` and ``draftwise compat TARGET DRAFT [--json]``.

Machine-readable output goes to stdout; notes go to stderr. Heavy imports happen inside the
handlers so that ``draftwise --help`` and the other sub-commands stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tuner.safetext import error_text, safe_text
from tuner.units import format_bytes


def register(subparsers) -> None:
    """Add the ``scan`` and ``compat`` sub-commands to the ``draftwise`` parser."""
    p = subparsers.add_parser(
        "scan",
        help="list the GGUF models in a folder, their kinds and draft families",
        description="Scan DIR recursively for .gguf files: classify each (llm, mmproj, vocab-only, "
        "embedding, draft-head, unsupported, broken), join split sets, and group the LLMs into "
        "families that can draft for each other (llama.cpp's compatibility rules).",
    )
    p.add_argument("dir", type=Path, help="models folder (or one .gguf file)")
    p.add_argument("--json", action="store_true", help='print {"models": [...], "families": [...]} as JSON')
    p.add_argument("--no-cache", action="store_true", help="read every header again (ignore the scan cache)")
    p.set_defaults(func=run_scan)

    c = subparsers.add_parser(
        "compat",
        help="can DRAFT draft for TARGET? (llama.cpp's draft-simple vocabulary rules)",
        description="Apply common/speculative.cpp common_speculative_are_compatible to two GGUF files "
        "and name the rule that fails (vocab-type, bos, eos, vocab-size, token-text). "
        "Exit status 0 for either verdict, 2 when a file cannot be read.",
    )
    c.add_argument("target", type=Path, help="target model .gguf (first shard of a split set)")
    c.add_argument("draft", type=Path, help="draft model .gguf")
    c.add_argument("--json", action="store_true", help='print {"compatible", "rule", "message"} as JSON')
    c.set_defaults(func=run_compat)


def _human_size(n: int | None) -> str:
    """Bytes in binary units, as ``draftwise plan`` / ``devices`` print them (``1.1 MiB``); ``-`` when 0/unknown."""
    return format_bytes(n) if n else "-"

def _rel(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (else whole), made safe to print (:func:`tuner.safetext.safe_text`)."""
    try:
        return safe_text(path.relative_to(root))
    except ValueError:
        return safe_text(path)


def _table(models, families, root: Path) -> str:
    """The scan's table, problems and families for people: every header string and file name in it made
    safe (a control character in ``general.architecture`` or a file name is a visible escape, never a
    terminal command or a fake row)."""
    rows = [("KIND", "SIZE", "ARCH", "LAYERS", "MTP", "QUANT", "CTX", "VOCAB", "FILE")]
    notes = []
    for m in models:
        t = m.tokenizer
        vocab = safe_text(f"{t.vocab_type or t.model} {t.n_tokens}") if t else "-"
        shards = f" ({len(m.shards)} shards)" if len(m.shards) > 1 else ""
        rows.append(
            (
                m.kind,
                _human_size(m.size_bytes),
                safe_text(m.architecture or "-"),
                str(m.n_layers) if m.n_layers is not None else "-",
                str(m.mtp_layers) if m.mtp_layers else "-",
                safe_text(m.quantization or "-"),
                str(m.context_length) if m.context_length else "-",
                vocab,
                _rel(m.path, root) + shards,
            )
        )
        if m.error:
            notes.append(f"  {_rel(m.path, root)}: {safe_text(m.error)}")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    numeric = {1, 3, 4, 6}  # SIZE, LAYERS, MTP, CTX: right-aligned
    lines = [
        "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(r[:-1], widths)))
        + "  " + r[-1]
        for r in rows
    ]
    if notes:
        lines += ["", "Problems:"] + notes
    lines.append("")
    if not families:
        lines.append("No LLMs found, so no draft families.")
    for n, fam in enumerate(families, 1):
        first = fam.members[0].tokenizer
        lines.append(
            f"Family {n} ({safe_text(first.vocab_type or first.model)} vocabulary, {first.n_tokens} tokens, "
            f"{len(fam.members)} model{'s' if len(fam.members) != 1 else ''}):"
        )
        for entry in fam.targets:
            mtp = f" [MTP: {entry.target.mtp_layers} layer(s)]" if entry.target.mtp_layers else ""
            lines.append(f"  target {_rel(entry.target.path, root)}{mtp}")
            if not entry.drafts:
                lines.append("    no smaller compatible draft (n-gram speculation is still possible)")
            for cand in entry.drafts:
                ratio = f"{cand.size_ratio * 100:.1f} % of target" if cand.size_ratio is not None else "size unknown"
                lines.append(f"    draft {_rel(cand.model.path, root)}  score {cand.score:.2f}  ({ratio})")
                for w in cand.warnings:
                    lines.append(f"      warning: {safe_text(w)}")
            for head in entry.heads:
                lines.append(f"    head {_rel(head.model.path, root)}  {head.spec_type}  "
                             f"({safe_text(head.verdict.message)})")
            for hm, hv in entry.mismatched_heads:
                lines.append(f"    head {_rel(hm.path, root)} does not fit (rule: {hv.rule}): {safe_text(hv.message)}")
            lines.append("    routes: " + ", ".join(t for t, _ in entry.routes))
    return "\n".join(lines)


def run_scan(args: argparse.Namespace) -> int:
    """``draftwise scan``: exit 0 after listing (broken files are rows, not failures); 2 when DIR is missing."""
    from tuner.catalog.families import family_to_json, group_families
    from tuner.catalog.scan import model_to_json, scan_folder

    root = args.dir
    try:
        models = scan_folder(root, cache=not args.no_cache)
    except OSError as exc:  # missing, or a path the system refuses (a name too long, a link loop)
        print(f"draftwise scan: {error_text(exc)}", file=sys.stderr)
        return 2
    families = group_families(models)
    if args.json:
        out = {"models": [model_to_json(m) for m in models], "families": [family_to_json(f) for f in families]}
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not models:
        print(f"No .gguf files found under {safe_text(root)}." if root.is_dir()
              else f"{safe_text(root)}: not a regular .gguf file.")
    else:
        print(_table(models, families, root if root.is_dir() else root.parent))
    return 0


def compat_report(target_name: str, draft_name: str, compatible: bool, rule: str | None, message: str) -> str:
    """The readable verdict of ``draftwise compat``: one line saying whether the draft can draft for
    the target, then the reason (the verdict's message without a repeated "compatible:" prefix). The names
    and the reason (which quotes token texts and header strings) are made safe to print."""
    target_name, draft_name, reason = safe_text(target_name), safe_text(draft_name), safe_text(message)
    if reason.lower().startswith("compatible:"):
        reason = reason.split(":", 1)[1].strip()
    if compatible:
        return f"Compatible: {draft_name} can draft for {target_name}.\nReason: {reason}"
    why = f" (rule: {rule})" if rule else ""
    return f"NOT compatible: {draft_name} cannot draft for {target_name}{why}.\nReason: {reason}"


def _compat_model(role: str, path: Path):
    """The scanned ``target`` / ``draft`` (``role``) of ``compat``, or the one line saying why it cannot be
    read (not a regular file, a shard missing, broken, or a path the system refuses), made safe to print."""
    from tuner.catalog.model import KIND_BROKEN
    from tuner.catalog.scan import scan_file
    from tuner.catalog.split import missing_shards, short_name_list
    from tuner.storage import NotRegularFileError, file_kind

    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            return f"cannot read {role} {safe_text(NotRegularFileError(path, file_kind(path.stat().st_mode)))}"
        gone = missing_shards(path) if path.is_file() else ()
    except OSError as exc:  # a name longer than the system allows, a link loop, ...
        return f"cannot read {role} {error_text(exc)}"
    if gone:
        return (f"cannot read {role} {safe_text(path)}: incomplete split set: missing shard "
                + safe_text(short_name_list([p.name for p in gone])))
    m = scan_file(path)
    if m.kind == KIND_BROKEN and m.tokenizer is None:
        return f"cannot read {role} {safe_text(path)}: {safe_text(m.error)}"
    return m


def run_compat(args: argparse.Namespace) -> int:
    """``draftwise compat``: exit 0 with the verdict; 2 when a file cannot be read."""
    from tuner.catalog.compat import check_compatible
    from tuner.catalog.header import GGUFError

    models = []
    for role, path in (("target", args.target), ("draft", args.draft)):
        m = _compat_model(role, path)
        if isinstance(m, str):
            print(f"draftwise compat: {m}", file=sys.stderr)
            return 2
        models.append(m)
    try:
        verdict = check_compatible(models[0], models[1])
    except GGUFError as exc:
        print(f"draftwise compat: {safe_text(exc)}", file=sys.stderr)
        return 2
    if args.json:
        json.dump({"compatible": verdict.compatible, "rule": verdict.rule, "message": verdict.message}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(compat_report(args.target.name, args.draft.name, verdict.compatible, verdict.rule, verdict.message))
    return 0
