"""What ``draftwise tune`` prints when the sweep is done: the ``--json`` object, the table of launches and
comparisons, and the closing ``Decision:`` line with the decision's plain first sentence (``--details``: the
break-even and per-category lines and the rest of its sentences; the words come from the decision; nothing here
decides).

The ``--json`` object's fields are listed in ``tuner.cli.tune``'s docstring.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from tuner.calibration.decide import Decision
from tuner.calibration.request import TuneResult
from tuner.calibration.wording import break_even_words, no_drafts_note, render
from tuner.safetext import safe_text


def result_to_json(result: TuneResult) -> dict[str, Any]:
    """The ``--json`` object (see module docstring)."""
    d = result.decision
    prof = result.profile
    decision: dict[str, Any] = {
        "spec_type": d.winner.spec_type if d else None,
        "draft": d.winner.draft_path if d else None,
        "n_max": d.winner.n_max if d else None,
        "argv": list(prof.argv) if prof else None,
        "env": {"OMP_WAIT_POLICY": "PASSIVE"} if prof and prof.server_config.get("omp_passive") is True else {},
        "gen_tokens_per_s": d.gen_tokens_per_s if d else None,
        "baseline_gen_tokens_per_s": d.baseline_gen_tokens_per_s if d else None,
        "speedup": d.speedup if d else None,
        "reason": d.reason if d else ("cancelled" if result.cancelled else None),
        "first_sentence": result.rendered().first or None,
        "n_ctx": prof.keys.n_ctx if prof else None,
        "workload": prof.keys.workload if prof else None,
        "long_share": prof.keys.long_share if prof else None,
        "server_args": list(prof.keys.server_args) if prof else None,
    }
    if d is not None:
        decision.update(
            speedup_ci_low=d.speedup_ci_low,
            speedup_ci_high=d.speedup_ci_high,
            best_speculative_speedup=d.best_speculative_speedup,
            break_even=[b.to_json() for b in d.break_even],
            per_category=[c.to_json() for c in d.per_category],
        )
    if result.measurements:
        ms = [m.to_json() for m in result.measurements]
    elif prof is not None:
        ms = list(prof.evidence)
    else:
        ms = []
    return {
        "decision": decision,
        "measurements": [_measurement_json(m) for m in ms],
        "profile_path": str(result.profile_path) if result.profile_path else None,
        "reused": result.reused,
        "cancelled": result.cancelled,
        "dropped": [{"label": x.candidate.label, "reason": x.reason} for x in result.dropped],
    }


def _measurement_json(m: dict[str, Any]) -> dict[str, Any]:
    """One measurement's ``--json`` fields (from ``Measurement.to_json`` or a profile's evidence)."""
    return {
        "candidate": m.get("candidate"),
        "label": m.get("label"),
        "stage": m.get("stage"),
        "gen_tokens_per_s": m.get("gen_tokens_per_s"),
        "acceptance": m.get("acceptance"),
        "speculative_active": m.get("speculative_active"),
        "lossless": m.get("lossless"),
        "divergences": m.get("divergences") or [],
        "error": m.get("error"),
        "no_drafts_at": m.get("no_drafts_at"),
        "greedy_draft_n": m.get("greedy_draft_n"),
        "cut_short": bool(m.get("cut_short")),
        "superseded": m.get("superseded"),
    }


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def decision_line(d: Decision) -> str:
    """The closing line: ``Decision: <the decision's plain first sentence>`` ("Fastest here: the draft model
    good.gguf, about 1.4× faster than the model alone on your prompts."; a profile saved before the sentences
    were kept shows its own words); only a decision without words gets its label."""
    text = safe_text(render(d.sentences).first.strip() or d.reason.strip())
    return f"Decision: {text}" if text else f"Decision: {safe_text(d.winner.label)}."


def print_table(result: TuneResult, out: TextIO, details: bool = False) -> None:
    """Human-readable summary: one row per launch, one per configuration compared with no speculation, then the
    decision's line and the profile's path. ``details``: the break-even and per-category lines before the
    decision, and after its first sentence the rest of its sentences, one per line (``tune --details``);
    without it, one line says how to see them."""
    comparisons = result.comparison_figures()
    out.write(_launches_heading(result, bool(comparisons)))
    out.write(f"{'configuration':<46} {'stage':<8} {'tokens/s':>9} {'accept':>7} {'lossless':>8}  note\n")
    for m in result_to_json(result)["measurements"]:
        out.write(_launch_row(m))
    if comparisons:
        out.write("\nEach configuration against no speculation on the same requests (the decision's figures):\n")
        out.write(f"{'configuration':<46} {'speedup':>8} {'tokens/s':>9} {'baseline':>9} {'accept':>7}  compared on\n")
        for c in comparisons:
            out.write(_comparison_row(c))
    d = result.decision
    if d is not None:
        out.write("\n")
        if details:
            _write_details(d, out)
            out.write("\n")
        out.write(f"{decision_line(d)}\n")
        rest = result.rendered().details
        if details:
            out.writelines(f"  {safe_text(line)}\n" for line in rest)
        elif rest:
            out.write("(--details: the evidence behind it)\n")
    if result.profile_path:
        out.write(f"Profile: {safe_text(result.profile_path)}" + (" (reused)" if result.reused else "") + "\n")


def _launches_heading(result: TuneResult, compared: bool) -> str:
    if result.profile is not None and (result.reused or not result.measurements):  # a stale one: tune --details
        when = result.profile.created_unix_s
        return ("The saved profile's launches"
                + (f", measured {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}" if when else "")
                + (" (reused: still fresh" if result.reused else " (stale") + "; --force measures again), each on "
                "its own requests"
                + (" (compare configurations in the table below, not here):\n" if compared else ":\n"))
    if compared:
        return "Every launch, each on its own requests (compare configurations in the table below, not here):\n"
    return ("Every launch, each on its own requests at its own time (not a comparison: no configuration was "
            "compared with no speculation on the same requests):\n")


def _launch_row(m: dict[str, Any]) -> str:
    """One launch (a measurement's ``--json`` object) as a row of the first table."""
    # a run that drafted nothing cannot differ from the target alone: "yes" there would say nothing
    lossless = "-" if m["lossless"] is None or m.get("no_drafts_at") else ("yes" if m["lossless"] else "differs")
    # a type that drafted nothing: what was measured (the error's words may claim more than that)
    note = no_drafts_note(m.get("greedy_draft_n")) if m.get("no_drafts_at") else safe_text(m["error"] or "")
    if m.get("superseded"):
        note = f"not used ({safe_text(m['superseded'])})"
    elif m.get("cut_short") and not note:
        note = "cut short by the time limit"
    if not note and m["divergences"]:
        first = m["divergences"][0]
        note = (f"first differs at prompt {first['prompt_index'] + 1}, repetition {first['repetition'] + 1}, "
                f"character {first['char_offset']}")
    acc = "-" if m["acceptance"] is None else f"{100 * m['acceptance']:.0f} %"
    return (f"{_fit(safe_text(m['label'] or '')):<46} {(m['stage'] or ''):<8} {_fmt(m['gen_tokens_per_s'], '9.1f')} "
            f"{acc:>7} {lossless:>8}  {note}\n")


def _fit(label: str, width: int = 46) -> str:
    """``label`` in ``width`` characters: a longer one loses the middle of its file name, never its end (the draft
    length: "draft-simple generated-demo-draft.gguf n_max 16" must not read "… n_max 1")."""
    if len(label) <= width:
        return label
    cut = label.rfind(" n_max ")
    tail = label[cut:] if cut > 0 and len(label) - cut <= width - 12 else label[-(width // 3):]
    return label[:width - len(tail) - 1] + "…" + tail


def _comparison_row(c: dict[str, Any]) -> str:
    """One configuration against no speculation (``TuneResult.comparison_figures``) as a row."""
    acc = "-" if c.get("acceptance") is None else f"{100 * c['acceptance']:.0f} %"
    n_pairs, n_req = int(c.get("pairs") or 0), int(c.get("requests") or 0)
    how = (f"{n_pairs} adjacent pair{'s' if n_pairs != 1 else ''}, " if c.get("paired")
           else "screening runs (not adjacent), ")
    how += f"{n_req} request{'s' if n_req != 1 else ''}"
    if c.get("stopped_early"):
        how += ", stopped early as a loser"
    sp = "-" if c.get("speedup") is None else f"{c['speedup']:.2f}x"
    return (f"{_fit(safe_text(c.get('label') or '')):<46} {sp:>8} {_fmt(c.get('gen_tokens_per_s'), '.1f'):>9} "
            f"{_fmt(c.get('baseline_gen_tokens_per_s'), '.1f'):>9} {acc:>7}  {how}\n")


def _write_details(d: Decision, out: TextIO) -> None:
    """The break-even line of each draft model / type, then the per-category lines."""
    for b in d.break_even:
        out.write(f"break-even {safe_text(b.candidate.label)}: "
                  f"{break_even_words(b.acceptance, b.break_even_acceptance, b.never_pays)}\n")
    if d.per_category:
        label = safe_text(d.per_category[0].candidate_label or "best speculative configuration")
        out.write(f"per category, {label} vs no speculation on the same prompts and repetitions:\n")
    for cat in d.per_category:
        if cat.speedup is None:
            out.write(f"  {safe_text(cat.category)}: not measured (the run stopped before these prompts)\n")
            continue
        out.write(f"  {safe_text(cat.category)}: {cat.speedup:.2f}x ({cat.gen_tokens_per_s:.1f} vs "
                  f"{cat.baseline_gen_tokens_per_s:.1f} tokens/s, {cat.paired_requests} "
                  f"request{'s' if cat.paired_requests != 1 else ''})"
                  + (f", acceptance {100 * cat.acceptance:.0f} %" if cat.acceptance is not None else "") + "\n")


__all__ = ["decision_line", "print_table", "result_to_json"]
