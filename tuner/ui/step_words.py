"""The Tune tab's progress line in plain words: what the sweep is trying now first ("Trying the draft model
d.gguf (n_max 8)…", "Measuring the model alone…"), the sweep's own terse line after it as the detail. The CLI
keeps the terse line (``tuner.calibration`` events); only the app words it again, from the event's candidate
(data), never from its message.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tuner.calibration import Candidate, TuneEvent
from tuner.safetext import safe_text

#: Separates the plain words from the sweep's own line.
DETAIL_SEP = " — "


def candidate_words(c: Candidate) -> str:
    """What ``c`` speculates with, in plain words: "the model alone", "the draft model d.gguf (n_max 8)",
    "MTP, the model's own draft heads (n_max 3)", "n-gram speculation (ngram-mod, n_max 16)", a draft head
    file by its name; a chain names both ("n-gram speculation, then the draft model d.gguf (n_max 8)")."""
    if c.is_baseline:
        return "the model alone"
    n = f" (n_max {c.n_max})" if c.n_max is not None else ""
    parts = []
    for t in c.spec_types:
        if t.startswith("ngram"):
            parts.append(f"n-gram speculation ({t}" + (f", n_max {c.ngram_n_max})" if c.ngram_n_max else ")"))
        elif t == "draft-mtp" and not c.draft_path:
            parts.append(f"MTP, the model's own draft heads{n}")
        elif t == "draft-simple" and c.draft_path:
            parts.append(f"the draft model {safe_text(Path(c.draft_path).name)}{n}")
        elif c.draft_path:
            parts.append(f"the draft head {safe_text(Path(c.draft_path).name)} ({t}){n}")
        else:
            parts.append(f"{t}{n}")
    return ", then ".join(parts)


def plain_step(ev: TuneEvent) -> str | None:
    """The progress line of a sweep event, plain words first: a launch "Trying the draft model d.gguf (n_max
    8)… — probe: starting …" (the baseline: "Measuring the model alone… — …"; a verify-cost launch "Timing how
    long the model takes to check 4 drafted tokens (the draft model d.gguf)… — …"; a head-to-head launch "Comparing
    … with … on the same requests… — …"); None for any other event (its own message stands)."""
    c = ev.candidate
    if ev.kind != "launch" or c is None:
        return None
    if c.is_baseline:
        first = "Measuring the model alone…"
    elif c.synth_rates:  # the verify-cost stage: a benchmark of the target's checking, not a configuration
        first = (f"Timing how long the model takes to check {c.n_max} drafted tokens "
                 f"({candidate_words(replace(c, n_max=None))})…")
    elif isinstance(versus := ev.detail.get("versus"), dict):  # the chain rule's head-to-head launch
        first = f"Comparing {candidate_words(c)} with {candidate_words(Candidate.from_json(versus))} on the same requests…"
    else:
        first = f"Trying {candidate_words(c)}…"
    return f"{first}{DETAIL_SEP}{ev.message}" if ev.message else first


__all__ = ["DETAIL_SEP", "candidate_words", "plain_step"]
