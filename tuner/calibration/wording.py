"""The decision's words, rendered in one place from its sentences (``tuner.calibration.sentences``).

Every sentence a decision holds is data: a slot (where it stands), a kind (what it says) and the facts it
states (``params``: labels, figures, counts). :data:`RENDERERS` has one function per kind that turns those
facts into words; :func:`render` puts a decision's sentences in reading order (by slot, stable within one)
and joins them. The decision's ``reason``, the CLI's ``Decision:`` line, the GUI's text and the words of a
saved profile shown again all come from here, so no other module builds a decision's words and none reads
them back.

Kinds, by slot:

- HEADLINE: ``headline.serving``; one kind per reason for running the model alone (``alone.*``). Each has
  two renderers: its plain first sentence in a desktop user's words (:data:`PLAIN`: "Fastest here: the draft
  model X, about 1.4× faster than the model alone on your prompts.") and its evidence, the first of the
  details (:data:`RENDERERS`); ``saved.reason`` (a profile saved before sentences were kept: its reason,
  verbatim, as its first sentence).
- SPEED_VARIED: ``speed.varied`` (a configuration's launches ran more than 2× apart).
- EVIDENCE: ``evidence.paired``, ``evidence.chain_faster``, ``evidence.chain_not_faster``,
  ``evidence.divergence``.
- THREADS: ``threads.trade`` (the thread setting served and what it costs idle and gains with another
  busy program: ``tuner.calibration.threads``).
- CPU_WORKAROUND: ``cpu.no_repack`` (the words are ``tuner.hardware.repack.no_repack_sentence``'s, shared
  with ``draftwise doctor`` and the Serve tab).
- MIX: ``mix.not_applied``, ``mix.all_long``, ``mix.share``, ``mix.compared``.
- MACHINE_LOAD: ``machine.load``; ``saved.measured_on``.
- SWEEP: the search's own (``tuner.calibration.search``): ``sweep.baseline_superseded``,
  ``sweep.baseline_unsteady``, ``sweep.baseline_unmeasurable`` (a disturbed baseline launch measured again,
  or not), ``sweep.pruned`` (what was not launched because it could not beat the leader), ``sweep.time_limit``,
  ``sweep.long_context_left_out`` (``tuner.calibration.workload.LongContextPlan``);
  the report's: ``sweep.measured_with``, ``sweep.depth``, ``sweep.never_drafted``, ``sweep.where_it_ran``.
- any slot: ``text`` (words built before the sentence: the tune makes none; tests use it for a slot that
  has no kind yet).

The CAPTURED slot has no kind yet (issue 28 adds it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .candidates import Candidate
from .results import NoDrafts
from .sentences import TEXT, Sentence, Slot, in_reading_order

Params = Mapping[str, Any]
"""A sentence's facts as a renderer reads them (``Sentence.params``: plain JSON values)."""

Renderer = Callable[[Params], str]


@dataclass(frozen=True)
class Rendered:
    """A decision in words.

    Attributes:
        first: the first sentence (the headline; with ``reused``, after "Using the saved profile …").
        details: the sentences after it, in reading order.
        text: all of them, joined by single spaces (``first`` then ``details``); empty without sentences.
    """

    first: str
    details: tuple[str, ...]
    text: str


# ---- figures in words -------------------------------------------------------------------------------------
def pct(x: float | None) -> str:
    """``0.412`` → ``"41 %"``; ``None`` → ``"unknown"``."""
    return "unknown" if x is None else f"{100 * x:.0f} %"


def plain_tps(tps: float | None) -> str:
    """Tokens/s for the plain first sentence: whole numbers from 100 up, one decimal below
    (``738.4`` → ``"738"``, ``7.44`` → ``"7.4"``)."""
    v = tps or 0.0
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def plain_label(c: Candidate) -> str:
    """What a candidate does, in the user's words (the decision's first sentence), e.g. ``"the draft
    model draft-good.gguf, guessing up to 4 tokens ahead"``, ``"n-gram lookup (ngram-simple, which
    reuses spans of the prompt and the answer so far)"``; the baseline is ``"the model alone"``."""
    if c.is_baseline:
        return "the model alone"
    types = c.spec_types
    ngram = next((t for t in types if t.startswith("ngram")), None)
    ahead = f", guessing up to {c.n_max} tokens ahead" if c.n_max else ""
    if "draft-mtp" in types:
        out = f"the model's own multi-token prediction (MTP){ahead}"
    elif c.draft_path:
        out = f"the draft model {Path(c.draft_path).name}{ahead}"
    elif ngram is not None:
        return f"n-gram lookup ({ngram}, which reuses spans of the prompt and the answer so far)"
    else:
        out = c.label
    return out + (f", with n-gram lookup ({ngram})" if ngram is not None else "")


def figures_text(f: Params, with_tokens_per_s: bool = True) -> str:
    """The pooled figures of one comparison (``tuner.calibration.decide.figures``), e.g. ``"1.45× over 6
    adjacent pairs (30 requests, each run by both sides; sequential-test interval 1.31–1.60×): 145.0 vs
    100.0 tokens/s"``; without ``with_tokens_per_s`` the closing tokens/s figures are left out (the
    sentence before gave them)."""
    figs = f": {f['tps'] or 0.0:.1f} vs {f['base_tps'] or 0.0:.1f} tokens/s" if with_tokens_per_s else ""
    requests = int(f["requests"])
    each = ", each run by both sides" if requests != 1 else " run by both sides"
    req = f"{requests} request{_s(requests)}{each}"
    sp = f["speedup"] or 0.0
    if not f["paired"]:
        return f"{sp:.2f}× on the same requests in screening runs, not adjacent in time ({req}){figs}"
    n = int(f["pairs"])
    interval = ""
    if f["low"] is not None and f["high"] is not None:
        if f["decided_at"] is not None:
            interval = (f"; faster beyond noise at the sequential test's look after {f['decided_at']} pairs, "
                        f"interval {f['low']:.2f}–{f['high']:.2f}×")
        else:
            interval = f"; sequential-test interval {f['low']:.2f}–{f['high']:.2f}×"
    return f"{sp:.2f}× over {n} adjacent pair{_s(n)} ({req}{interval}){figs}"


def break_even_words(acceptance: float | None, break_even_acceptance: float | None, never_pays: bool) -> str:
    """One candidate's break-even (``tuner.calibration.decide.BreakEven``) in words, e.g. ``"acceptance
    41 %, break-even 58 %"`` or ``"acceptance 5 %, would not pay even at 100 % acceptance"``."""
    acc = "acceptance unknown" if acceptance is None else f"acceptance {pct(acceptance)}"
    if never_pays:
        return f"{acc}, would not pay even at 100 % acceptance"
    if break_even_acceptance is None:
        return f"{acc}, break-even unknown"
    if break_even_acceptance < 0.005:
        return f"{acc}, break-even 0 % (its verification steps cost no more than the baseline's tokens)"
    return f"{acc}, break-even {pct(break_even_acceptance)}"


def unmeasured_text(labels: Sequence[str]) -> str:
    """``"the time budget was spent before ngram-simple, … were measured (a re-tune with a larger time budget
    measures them)"`` (the first four labels named; no command-line advice: the app shows it too)."""
    names = ", ".join(labels[:4]) + (" and others" if len(labels) > 4 else "")
    return (f"the time budget was spent before {names} {'was' if len(labels) == 1 else 'were'} measured "
            "(a re-tune with a larger time budget measures them)")


def _s(n: int) -> str:
    return "s" if n != 1 else ""


# ---- types that never drafted ----------------------------------------------------------------------------
def _requests_words(nd: NoDrafts) -> str:
    n = nd.requests
    return f" in {n} request{_s(n)}" if n else ""


def _greedy_words(nd: NoDrafts) -> str:
    """What the short greedy check measured for a type that drafted nothing at the served sampling."""
    if nd.greedy_draft_n is None:
        return ""
    if nd.greedy_draft_n == 0:
        return ", nor in the short greedy check (temperature 0)"
    return f", although it drafted {nd.greedy_draft_n} tokens in the short greedy check (temperature 0)"


def no_drafts_error(spec_type: str, nd: NoDrafts) -> str:
    """What an n-gram type that ran but never drafted measured, e.g. ``"ngram-mod drafted nothing in 14 requests
    at the served sampling (<Sampling.describe's words>), nor in the short greedy check (temperature 0)"``: only
    what was measured, never a claim about the prompts in general."""
    return f"{spec_type} drafted nothing{_requests_words(nd)} at the served sampling ({nd.sampling}){_greedy_words(nd)}"


def measured_line(label: str, nd: NoDrafts) -> str:
    """The progress line of a run that drafted nothing (the sweep's "measured" event, shown by the app's Tune tab
    and ``draftwise tune``'s progress instead of the run's error words), e.g. ``"ngram-mod: drafted nothing in 5
    requests at the served sampling (<Sampling.describe's words>), nor in the short greedy check (temperature
    0)"``."""
    return f"{label}: {no_drafts_error('', nd).lstrip()}"


def no_drafts_note(greedy_draft_n: int | None) -> str:
    """A launch that drafted nothing, as a table note (``draftwise tune``'s launches): ``"drafted nothing"``, with
    what the short greedy check drafted when it ran (``"drafted nothing; nothing in the short greedy check
    either"``, ``"drafted nothing; 12 tokens in the short greedy check"``)."""
    if greedy_draft_n is None:
        return "drafted nothing"
    if greedy_draft_n == 0:
        return "drafted nothing; nothing in the short greedy check either"
    return f"drafted nothing; {greedy_draft_n} tokens in the short greedy check"


def never_entry(label: str, spec_type: str, error: str | None, no_drafts_at: str | None,
                no_drafts: NoDrafts | None) -> dict[str, Any]:
    """The params of one type that never drafted (or failed), as the ``alone.*`` sentences hold them."""
    return {"label": label, "spec_type": spec_type, "error": error, "no_drafts_at": no_drafts_at,
            "no_drafts": no_drafts.to_json() if no_drafts is not None else None}


def _error_words(e: Params) -> str:
    nd = e.get("no_drafts")
    if nd:
        return no_drafts_error(str(e["spec_type"]), NoDrafts.from_json(nd))
    if e.get("no_drafts_at"):  # a saved profile's entry from before the facts were kept: what was measured
        return f"{e['spec_type']} drafted nothing at the served sampling ({e['no_drafts_at']})"
    return str(e.get("error") or "")


def _never_rest(e: Params) -> str | None:
    """What follows "<type> " for one entry that never drafted, the served sampling named as "these sampling
    settings" (the "Measured with …" sentence names it once); ``None`` when the entry is not one."""
    nd = e.get("no_drafts")
    if nd:
        facts = NoDrafts.from_json(nd)
        return f"drafted nothing{_requests_words(facts)} at these sampling settings{_greedy_words(facts)}"
    return "drafted nothing at these sampling settings" if e.get("no_drafts_at") else None


def never_text(entries: Sequence[Params]) -> str:
    """The types that ran but never drafted, named once, with what they measured stated once when they share
    it, e.g. ``"ngram-mod, ngram-simple drafted nothing in 14 requests at these sampling settings, nor in the
    short greedy check (temperature 0)"``."""
    rests = [_never_rest(e) for e in entries]
    if any(r is None for r in rests):
        return "; ".join(f"{e['label']}: {_error_words(e)}" for e in entries)
    if len(set(rests)) == 1:  # one shared finding: stated once
        return f"{', '.join(str(e['label']) for e in entries)} {rests[0]}"
    return "; ".join(f"{e['label']} {r}" for e, r in zip(entries, rests))


# ---- HEADLINE ------------------------------------------------------------------------------------------
# Each HEADLINE kind has two renderers: its plain first sentence (:data:`PLAIN`, the words a desktop user
# reads first: the GUI's decision line, the notification, ``draftwise tune``'s last line) and the sentence of
# evidence behind it (:data:`RENDERERS`, the first of the details).
def short_label(c: Candidate) -> str:
    """What a candidate is, in a desktop user's words and without its settings (the plain first sentence),
    e.g. ``"the draft model good.gguf"``, ``"n-gram lookup (reusing text already in the conversation)"``,
    ``"the model's own multi-token prediction (MTP)"``; the baseline is ``"the model alone"``."""
    if c.is_baseline:
        return "the model alone"
    types = c.spec_types
    ngram = any(t.startswith("ngram") for t in types)
    if "draft-mtp" in types:
        out = "the model's own multi-token prediction (MTP)"
    elif c.draft_path:
        out = f"the draft model {Path(c.draft_path).name}"
    elif ngram:
        return "n-gram lookup (reusing text already in the conversation)"
    else:
        out = c.label
    return out + (" with n-gram lookup" if ngram else "")


def faster_words(speedup: float | None) -> str:
    """A speedup in plain words: ``1.43`` → ``"about 1.4× faster"``, ``1.08`` → ``"about 8 % faster"`` (below
    1.15× a "1.1×" reads as nothing)."""
    sp = speedup or 1.0
    if sp < 1.15:
        return f"about {max(1, round(100 * (sp - 1))):.0f} % faster"
    return f"about {sp:.1f}× faster"


def _tried(p: Params) -> str:
    """The best speculative configuration of an ``alone.*`` sentence in plain words (its candidate, when the
    sentence holds it; a sentence saved before it did says "the best speculation tried")."""
    c = p.get("candidate")
    return f"speculation with {short_label(Candidate.from_json(c))}" if c else "the best speculation tried"


def _plain_serving(p: Params) -> str:
    c = Candidate.from_json(p["candidate"])
    return f"Fastest here: {short_label(c)}, {faster_words(p['speedup'])} than the model alone on your prompts."


def _plain_not_enough(p: Params) -> str:
    sp = (p.get("figures") or {}).get("speedup")
    return (f"Serving the model alone for now: {_tried(p)} looked {faster_words(sp)} on your prompts, but the "
            "measurements were too few to be sure (a longer tune can settle it).")


def _plain_never_drafted(p: Params) -> str:
    if p.get("unmeasured"):
        return ("Serving the model alone: the speculation measured never got going on your prompts, and the time "
                "budget ran out before the rest was measured.")
    return "Fastest here: the model alone — speculation never got going on your prompts."


def _plain_screening(p: Params) -> str:
    sp = (p.get("figures") or {}).get("speedup") or 0.0
    if sp >= 1.05 and p.get("acceptance"):  # it drafted, and its bar stands taller on the chart: say what it is
        return (f"Serving the model alone: {_tried(p)} looked {faster_words(sp)} in a first quick measurement, but "
                "that was never confirmed on your prompts.")
    return "Serving the model alone: no speculation was confirmed faster on your prompts."


PLAIN: Mapping[str, Renderer] = {
    "headline.serving": _plain_serving,
    "alone.not_enough_evidence": _plain_not_enough,
    "alone.unsteady": lambda p: ("Serving the model alone: its own speed changed too much during the tune to tell "
                                 "whether speculation helps on your prompts."),
    "alone.slower": lambda p: f"Fastest here: the model alone — {_tried(p)} was slower on your prompts.",
    "alone.screening_only": lambda p: _plain_screening(p),
    "alone.within_noise": lambda p: (f"Serving the model alone: {_tried(p)} was no faster beyond measurement noise "
                                     "on your prompts."),
    "alone.never_drafted": _plain_never_drafted,
    "alone.failed": lambda p: "Serving the model alone: speculation did not run correctly on this machine.",
    "alone.unmeasured": lambda p: "Serving the model alone: the time budget ran out before any speculation was measured.",
    "alone.nothing": lambda p: ("Serving the model alone: there was nothing to speculate with (no compatible draft "
                                "model, no n-gram type)."),
}
"""The plain first sentence of each HEADLINE kind (a saved profile's ``saved.reason`` has none: its words are
shown as they were saved)."""


def _serving(p: Params) -> str:
    c = Candidate.from_json(p["candidate"])
    return (f"Serving {plain_label(c)}: {plain_tps(p['tps'])} against {plain_tps(p['base_tps'])} tokens/s for the "
            "model alone on these prompts.")


def _acceptance_clause(a: Params | None) -> str:
    if not a:
        return ""
    out = f"; it reached {pct(a['acceptance'])} draft acceptance"
    be = a.get("break_even")
    if a.get("never_pays"):
        out += ", and even 100 % acceptance would not pay on this machine"
    elif be is not None and be >= 0.005:
        out += f", break-even on this machine is about {pct(be)}"
    return out


def _alone_not_enough(p: Params) -> str:
    out = (f"The evidence was not enough to serve {p['label']} ({figures_text(p['figures'])}); "
           f"a paired test at a {100 * p['alpha']:.0f} % error rate needs more pairs")
    if p.get("pairs_needed") is not None and p.get("more_s") is not None:
        out += (f": about {p['pairs_needed']} pairs in all, about {p['more_s']:.0f} s more "
                "(a longer sweep would settle it)")
    else:
        out += " (a longer sweep, on a quieter machine, would settle it)"
    return out + _acceptance_clause(p.get("acceptance")) + "."


def _alone_unsteady(p: Params) -> str:
    return (f"No speculative configuration was confirmed in paired rounds; the screening figures "
            f"({p['label']}: {figures_text(p['figures'])}) come from launches minutes apart while the model's own "
            "speed varied, so they are not evidence either way" + _acceptance_clause(p.get("acceptance")) + ".")


def _alone_slower(p: Params) -> str:
    return (f"The best speculative configuration ({p['label']}) was slower than the target alone "
            f"({figures_text(p['figures'])})" + _acceptance_clause(p.get("acceptance")) + ".")


def _alone_screening_only(p: Params) -> str:
    return (f"No speculative configuration was confirmed in paired rounds; the best screening "
            f"result was {p['label']} ({figures_text(p['figures'])}), which is not evidence enough to serve it"
            + _acceptance_clause(p.get("acceptance")) + ".")


def _alone_within_noise(p: Params) -> str:
    return (f"The best speculative configuration ({p['label']}) was within the measurement noise "
            f"of the target alone ({figures_text(p['figures'])}; needs more than {1 + p['min_gain']:.2f}×)"
            + _acceptance_clause(p.get("acceptance")) + ".")


def _alone_never_drafted(p: Params) -> str:
    never = never_text(p["never"])
    if p.get("unmeasured"):
        # the measured ones proposed no token, the rest never ran: say both, not "none drafted"
        return f"No measured speculative configuration drafted any token: {never}; {unmeasured_text(p['unmeasured'])}."
    return f"No speculative configuration drafted any token: {never}."


def _alone_failed(p: Params) -> str:
    return ("No speculative configuration ran correctly: "
            + "; ".join(f"{e['label']}: {_error_words(e)}" for e in p["failed"]) + ".")


def _alone_unmeasured(p: Params) -> str:
    return f"No speculative configuration was measured: {unmeasured_text(p['unmeasured'])}."


def _alone_nothing(p: Params) -> str:
    return ""  # the plain first sentence says it all


# ---- SPEED_VARIED -------------------------------------------------------------------------------------------
def _speed_varied(p: Params) -> str:
    others = int(p.get("others") or 0)
    more = f" (and {others} more configuration{_s(others)} varied as much)" if others else ""
    return (f"The machine's speed varied too much for these figures to mean much: {p['label']} ran at "
            f"{plain_tps(p['low'])} to {plain_tps(p['high'])} tokens/s in {p['launches']} launches on the same "
            f"prompts{more}; a re-tune on a quieter machine, or with fewer threads, would help.")


# ---- EVIDENCE -----------------------------------------------------------------------------------------
def _evidence_paired(p: Params) -> str:
    acc = f", draft acceptance {pct(p['acceptance'])}" if p.get("acceptance") is not None else ""
    return (f"The evidence: {p['label']} against no speculation, "
            f"{figures_text(p['figures'], with_tokens_per_s=False)}{acc}.")


def _contrast(p: Params) -> str:
    """Chain ÷ single with its interval rounded outwards (a low end of 0.998 reads 0.99, never the bar's 1.00), to
    three decimals where two would read as the bar itself (1.004: "1.004", not "1.00")."""
    c = p.get("contrast")
    if not c:
        return ""
    low, high = math.floor(c["low"] * 100) / 100, math.ceil(c["high"] * 100) / 100
    low_s = f"{low:.2f}"
    if abs(low - (1 + float(p.get("min_gain") or 0.0))) < 1e-9 and c["low"] > low:
        low_s = f"{math.floor(c['low'] * 1000) / 1000:.3f}"
    direct = int(c.get("head_to_head") or 0)
    run = f", {direct} of them run by the two head to head" if direct else ""
    return f"{c['mean']:.2f}× over their pairs{run}, interval {low_s}–{high:.2f}×"


def _chain_faster(p: Params) -> str:
    return (f"It is faster than the best single type, {p['single']}, beyond noise "
            f"({_contrast(p)}; the interval needs to lie above {1 + p['min_gain']:.2f}×).")


def _chain_not_faster(p: Params) -> str:
    return (f"The chain {p['chain']} measured {p['chain_speedup'] or 0.0:.2f}× but was not faster than "
            f"{p['single']} beyond noise ({_contrast(p) or 'too few pairs'}; a chain is served only when the interval "
            f"lies above {1 + p['min_gain']:.2f}×), so the simpler configuration is served.")


def _divergence(p: Params) -> str:
    more = int(p["more"])
    return (f"Its output first differed from the target alone's at prompt {p['prompt'] + 1}, repetition "
            f"{p['repetition'] + 1}, character {p['char']}"
            + (f" ({more} more request{_s(more)} differed)" if more else "")
            + "; batched verification can flip a near-tie of the greedy choice.")


# ---- MIX ------------------------------------------------------------------------------------------------
def _mix_not_applied(p: Params) -> str:
    return (f"No long-context request was compared, so the long-context share of {pct(p['share'])} could not be "
            "applied: the figures are for short requests.")


def _mix_all_long(p: Params) -> str:
    return "Every compared request was a long-context one."


def _split(p: Params) -> str:
    s, lg = p["short"], p["long"]
    return f": short requests {s:.2f}×, long-context requests {lg:.2f}×" if p.get("differ") else ""


def _mix_share(p: Params) -> str:
    return f"Over a served mix of {pct(p['share'])} long-context requests (the long-context share setting){_split(p)}."


def _mix_compared(p: Params) -> str:
    # the compared requests' own mix, every request weighing the same: not the prompt set's share
    return (f"Over the compared requests, {p['n_long']} of {p['requests']} long-context ({pct(p['share'])}, every "
            f"request weighing the same){_split(p)}.")


# ---- MACHINE_LOAD -----------------------------------------------------------------------------------------
def _load_words(p: Params, sweep: str) -> str:
    parts = []
    load = p.get("load")
    if load:
        parts.append(f"Other programs used {100 * load['other_cpu_mean']:.0f} % of the CPU during {sweep}"
                     + (f" (up to {100 * load['other_cpu_max']:.0f} %)"
                        if load["other_cpu_max"] >= load["other_cpu_mean"] + 0.1 else "")
                     + (f"; the hypervisor took {100 * load['steal_mean']:.0f} % (steal time)"
                        if load["steal_mean"] >= 0.02 else "")
                     + "; figures are less certain.")
    n = int(p.get("competing") or 0)
    if n:
        parts.append(f"{n} other llama-server process{'es' if n != 1 else ''} ran on this machine during {sweep} "
                     "and competed with it.")
    return " ".join(parts)


def _when(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d at %H:%M UTC", time.gmtime(unix_s))


def _machine_load(p: Params, measured_unix_s: float | None) -> str:
    if measured_unix_s is None:
        return _load_words(p, "the sweep")
    # shown again later: the machine may be quiet now, so the sentence says when that sweep ran
    words = _load_words(p, "that sweep")
    return f"This profile was measured on {_when(measured_unix_s)}; " + words[:1].lower() + words[1:]


def _saved_measured_on(p: Params, measured_unix_s: float | None) -> str:
    if measured_unix_s is None:
        return ""
    when = f"This profile was measured on {_when(measured_unix_s)}"
    if p.get("busy"):
        return when + "; what it says about other programs on the machine was true then, not necessarily now."
    return when + "."


def captured_period(first_unix_s: float, last_unix_s: float, now_unix_s: float | None = None) -> str:
    """``"between 14:02 and 14:20 today"`` (local time; ``"on 2026-12-01 between …"`` for another day, ``"at
    14:02 today"`` for one moment, ``"between 2026-11-30 at 23:50 and 2026-12-01 at 00:10"`` across days)."""
    first, last = time.localtime(first_unix_s), time.localtime(last_unix_s)
    today = time.localtime(time.time() if now_unix_s is None else now_unix_s)[:3]

    def day(t: time.struct_time) -> str:
        return "today" if t[:3] == today else time.strftime("on %Y-%m-%d", t)

    a, b = time.strftime("%H:%M", first), time.strftime("%H:%M", last)
    if first[:3] != last[:3]:
        return f"between {time.strftime('%Y-%m-%d at %H:%M', first)} and {time.strftime('%Y-%m-%d at %H:%M', last)}"
    if a == b:
        return f"at {a} {day(first)}"
    return f"between {a} and {b} {day(first)}" if day(first) == "today" else f"{day(first)} between {a} and {b}"


def _captured(p: Params) -> str:
    n = int(p.get("requests") or 0)
    first, last = p.get("first_unix_s"), p.get("last_unix_s")
    when = f" served {captured_period(float(first), float(last))}" if first is not None and last is not None else ""
    return f"Tuned on {n} request{_s(n)}{when}."


# ---- SWEEP ----------------------------------------------------------------------------------------------
def describe_workload(chat: bool, raw_endpoint: str, sampling: str, n_ctx: int | None) -> str:
    """The measured requests in words, e.g. ``"chat requests (/v1/chat/completions) at greedy (temperature 0),
    context 8192"`` (``sampling``: ``Sampling.describe``'s words)."""
    shape = "chat requests (/v1/chat/completions)" if chat else f"raw completions ({raw_endpoint})"
    return f"{shape} at {sampling}" + (f", context {n_ctx}" if n_ctx else "")


def _measured_with(p: Params) -> str:
    out = f"Measured with {describe_workload(p['chat'], p['raw_endpoint'], p['sampling'], p['n_ctx'])}"
    g = p.get("greedy_check")
    if g:
        n, t = int(g["prompts"]), int(g["tokens"])
        out += (f"; each configuration's first launch also ran a short greedy check (up to {n} prompt{_s(n)} of "
                f"{t} tokens at temperature 0), its output compared with the model alone's")
    return out + "."


def _depth(p: Params) -> str:
    parts = ", ".join(f"{category} {speedup:.2f}×" for category, speedup in p["rows"])
    return f"At depth (≥ half the context: {parts}) the speedup differs from the overall {p['overall']:.2f}×."


def _never_drafted(p: Params) -> str:
    return f"{', '.join(p['labels'])} drafted nothing at these sampling settings."


def where_it_ran(run: Params) -> str:
    """Where the target and the draft of one candidate ran (``tuner.calibration.report``'s facts), e.g.
    ``"the target over RPC on RPC0 (192.168.1.20:50052) with this machine's CPU for the rest, the draft on
    this machine's CPU"``."""
    if run["rpc"]:
        names = ", ".join(f"{name} ({endpoint})" for name, endpoint in run["hosts"]) or ", ".join(run["rpc"])
        layers = f" ({run['offloaded']} of {run['layers']} layers offloaded)" if run.get("offloaded") is not None \
            else ""
        target = (f"the target over RPC on {names}{layers} with "
                  + ("the local GPUs" if run["local_gpus"] else "this machine's CPU") + " for the rest")
    else:
        target = "the target on this machine only" + (
            f" ({run['ngl']} layers on its GPUs, the rest on its CPU)" if run["local_gpus"] and run["ngl"]
            else " (its CPU)")
    if run["draft"] is None:
        return target
    return f"{target}, " + ("the draft on this machine's CPU" if run["draft"] == "cpu" else "the draft on this machine")


def _where(p: Params) -> str:
    return "Where it ran: " + "; ".join(f"{run['label']}: {where_it_ran(run)}" for run in p["runs"]) + "."


def _pruned(p: Params) -> str:
    parts = [f"{e['label']} (at most {e['at_most']:.2f}× by {e['basis']}'s acceptance, below {e['leader']} at "
             f"{e['leader_ratio']:.2f}×)" for e in p["pruned"]]
    return "Not launched, because on these prompts they could not beat the best configuration screened so far: " \
        + "; ".join(parts) + "."


def _time_limit(p: Params) -> str:
    lim, budget = float(p["limit_s"]), float(p["budget_s"])
    lim_text = f"{lim:.0f}" if lim >= 20 else f"{lim:.1f}"
    return (f"The sweep stopped at its time limit ({lim_text} s for a {budget:.0f} s budget: the estimates from the "
            f"warm-up ran short); cut short or kept from starting by it: {', '.join(p['cut'])}.")


def _baseline_unmeasurable(p: Params) -> str:
    return (f"The model alone measured {p['first_tps']:.1f} tokens/s in the baseline launch but {p['idle_tps']:.1f} "
            f"in {p['idle_label']}, which drafted nothing; the budget left no time to measure it again, so figures "
            "against the baseline are uncertain.")


def _baseline_superseded(p: Params) -> str:
    return (f"The first launch of the model alone was disturbed ({p['first_tps']:.1f} tokens/s; {p['idle_label']}, "
            f"which drafted nothing, ran {p['idle_tps']:.1f}); it was measured again at {p['again_tps']:.1f} "
            "tokens/s, and that launch is the reference.")


def _baseline_unsteady(p: Params) -> str:
    return (f"The model alone ran at {p['first_tps']:.1f}, {p['idle_tps']:.1f} ({p['idle_label']}, which drafted "
            f"nothing) and {p['again_tps']:.1f} tokens/s in three launches: its speed varied with the machine's "
            "load, so figures from launches minutes apart (screening) are not evidence either way; only pairs "
            "measured next to each other in time can show a speedup.")


def _long_context_left_out(p: Params) -> str:
    return (f"The long-context requests were left out: one would take about {p['one_s']:.0f} s here "
            f"({p['prompt_tokens']} prompt tokens at {p['prompt_tokens_per_s']:.0f} tokens/s, then {p['n_predict']} "
            f"generated at {p['gen_tokens_per_s']:.0f} tokens/s), more than a {p['budget_s']:.0f} s budget "
            "affords; the decision holds for short requests only.")


def _cpu_no_repack(p: Params) -> str:
    from tuner.hardware.repack import no_repack_sentence

    return no_repack_sentence(p.get("cause"), tuple(p.get("build_types") or ()))


def _tps(tps: object) -> str:
    """Tokens/s of the thread sentence: whole numbers from 10 up (``59.2`` → ``"59"``), one decimal below."""
    v = float(tps) if isinstance(tps, (int, float)) else 0.0
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _loaded(tps: object, at_most: object) -> str:
    return ("at most " if at_most else "") + _tps(tps)


def _threads(p: Params) -> str:
    """The thread stage's trade (``tuner.calibration.threads.threads_sentence``)."""
    where = " (measured with the model alone)" if p.get("of_baseline") else ""
    head = (f"Threads{where}: {p['setting']}: {_loaded(p.get('idle_tps'), p.get('idle_at_most'))} tokens/s idle, "
            f"{_loaded(p.get('loaded_tps'), p.get('loaded_at_most'))} with another busy program")
    if p.get("default_idle_tps") is not None and p.get("default_idle_at_most"):
        # collapsed even without the stage's burner: another program kept the CPU busy already
        alone = " with the model alone" if p.get("default_of_baseline") else ""
        return (f"{head}; the default stalled{alone} even without the added load (at most "
                f"{_tps(p.get('default_idle_tps'))} tokens/s: another program was already using the CPU).")
    if p.get("default_idle_tps") is not None:
        alone = " (measured with the model alone)" if p.get("default_of_baseline") else ""
        return (f"{head}; the default would be {_tps(p.get('default_idle_tps'))} and "
                f"{_loaded(p.get('default_loaded_tps'), p.get('default_loaded_at_most'))}{alone}.")
    if p.get("sweep_default_tps") is not None:
        return (f"{head}; the default was not tried with another busy program in the time left (the sweep measured "
                f"it at {_tps(p.get('sweep_default_tps'))} tokens/s).")
    if p.get("other") is not None:
        return (f"{head}; {p['other']} would be {_tps(p.get('other_idle_tps'))} and "
                f"{_tps(p.get('other_loaded_tps'))}.")
    return f"{head}."


def _text(p: Params) -> str:
    return str(p["text"])  # words built before the sentence (tests: a slot without a kind yet)


RENDERERS: Mapping[str, Renderer] = {
    "headline.serving": _serving,
    "alone.not_enough_evidence": _alone_not_enough,
    "alone.unsteady": _alone_unsteady,
    "alone.slower": _alone_slower,
    "alone.screening_only": _alone_screening_only,
    "alone.within_noise": _alone_within_noise,
    "alone.never_drafted": _alone_never_drafted,
    "alone.failed": _alone_failed,
    "alone.unmeasured": _alone_unmeasured,
    "alone.nothing": _alone_nothing,
    "saved.reason": lambda p: str(p["reason"]),
    "speed.varied": _speed_varied,
    "evidence.paired": _evidence_paired,
    "evidence.chain_faster": _chain_faster,
    "evidence.chain_not_faster": _chain_not_faster,
    "evidence.divergence": _divergence,
    "cpu.no_repack": _cpu_no_repack,
    "captured.replayed": _captured,
    "threads.trade": _threads,
    "mix.not_applied": _mix_not_applied,
    "mix.all_long": _mix_all_long,
    "mix.share": _mix_share,
    "mix.compared": _mix_compared,
    "sweep.measured_with": _measured_with,
    "sweep.depth": _depth,
    "sweep.never_drafted": _never_drafted,
    "sweep.where_it_ran": _where,
    "sweep.time_limit": _time_limit,
    "sweep.pruned": _pruned,
    "sweep.baseline_unmeasurable": _baseline_unmeasurable,
    "sweep.baseline_superseded": _baseline_superseded,
    "sweep.baseline_unsteady": _baseline_unsteady,
    "sweep.long_context_left_out": _long_context_left_out,
    TEXT: _text,
}
"""One renderer per sentence kind (those whose words depend on when they are read are :data:`DATED`)."""

DATED: Mapping[str, Callable[[Params, float | None], str]] = {
    "machine.load": _machine_load,
    "saved.measured_on": _saved_measured_on,
}
"""Renderers that also take the time the profile was measured (``None``: the sweep that just ran)."""

KINDS = frozenset(RENDERERS) | frozenset(DATED)
"""Every sentence kind :func:`render` knows."""


def _texts(sentence: Sentence, measured_unix_s: float | None) -> list[str]:
    """One sentence's words as the sentences a reader sees: a HEADLINE kind's plain first sentence, then its
    evidence; any other kind one sentence (empty ones left out)."""
    if sentence.kind in DATED:
        texts = [DATED[sentence.kind](sentence.params, measured_unix_s)]
    else:
        renderer = RENDERERS.get(sentence.kind)
        if renderer is None:
            raise ValueError(f"no renderer for the decision's sentence kind {sentence.kind!r}")
        plain = PLAIN.get(sentence.kind)
        texts = [plain(sentence.params)] if plain is not None else []
        texts.append(renderer(sentence.params))
    return [t for t in texts if t]


def words(sentence: Sentence, measured_unix_s: float | None = None) -> str:
    """One sentence's words (a HEADLINE kind: its plain first sentence, then its evidence).

    Raises:
        ValueError: no renderer for ``sentence.kind`` (e.g. a profile written by a newer Draftwise).
    """
    return " ".join(_texts(sentence, measured_unix_s))


REUSED_NOTE = "Using the saved profile (still fresh): nothing was measured again."
"""The first detail of a saved profile's decision served again (its first sentence stays the plain one)."""


def render(sentences: Iterable[Sentence], *, measured_unix_s: float | None = None, reused: bool = False) -> Rendered:
    """``sentences`` in words, in reading order (:func:`tuner.calibration.sentences.in_reading_order`): the
    HEADLINE's plain first sentence (:data:`PLAIN`) is :attr:`Rendered.first`; its evidence and every later
    sentence are the details.

    Args:
        sentences: a decision's sentences, in any order.
        measured_unix_s: when the profile behind them was measured, for a decision shown again later: the
            sentence about other programs on the machine then says when ("This profile was measured on
            2026-12-01 at 11:50 UTC; other programs used …"); ``None`` = the sweep that just ran.
        reused: the decision is a saved profile's, served again: :data:`REUSED_NOTE` is the first detail.

    Raises:
        ValueError: a sentence of a kind without a renderer.
    """
    texts = [t for s in in_reading_order(sentences) for t in _texts(s, measured_unix_s)]
    if reused:
        texts = [texts[0] if texts else "No reason was recorded.", REUSED_NOTE, *texts[1:]]
    if not texts:
        return Rendered("", (), "")
    return Rendered(texts[0], tuple(texts[1:]), " ".join(texts))


def of_slot(sentences: Iterable[Sentence], slot: Slot) -> tuple[Sentence, ...]:
    """The sentences of one slot, in the order given."""
    return tuple(s for s in sentences if s.slot == slot)


__all__ = [
    "DATED",
    "KINDS",
    "RENDERERS",
    "PLAIN",
    "REUSED_NOTE",
    "Rendered",
    "break_even_words",
    "describe_workload",
    "faster_words",
    "figures_text",
    "never_entry",
    "measured_line",
    "never_text",
    "no_drafts_error",
    "no_drafts_note",
    "of_slot",
    "pct",
    "plain_label",
    "plain_tps",
    "render",
    "short_label",
    "unmeasured_text",
    "where_it_ran",
    "words",
]
