"""The Monitor's live prediction and the tray's offer of a re-tune (issue 28 item 4), in words (no Qt).

:class:`LiveAdvice` reads the collector's window of the last requests' speculative counters
(:attr:`tuner.telemetry.collector.Collector.spec_window`) and the served profile's facts
(:class:`tuner.calibration.advice.ProfileFacts`, loaded once per served configuration), and asks
:func:`tuner.calibration.advice.live_advice`. It only words the result: nothing here changes what is served; the
tray's *Re-tune on recent requests* runs only when the user clicks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.calibration import Advice, ProfileFacts, advice_on_window
from tuner.profiles import ProfileError, ProfileStore

PREDATES = "This profile predates live predictions: re-tune it to see here how the served requests would run."
"""What the Monitor says while serving speculation from a profile saved without the facts a prediction needs."""


def speed_words(ratio: float) -> str:
    """A speedup over the model alone in plain words: "1.31× faster than the model alone", "22% slower than the
    model alone", "as fast as the model alone" (within half a percent)."""
    if abs(ratio - 1.0) < 0.005:
        return "as fast as the model alone"
    if ratio > 1.0:
        return f"{ratio:.2f}× faster than the model alone"
    return f"{1.0 - ratio:.0%} slower than the model alone"


def prediction_line(adv: Advice) -> str:
    """The Monitor's line: "Predicted from the last 24 requests: 1.31× faster than the model alone (measured when
    tuned: 1.45×)." and the verdict's sentence after it when there is one (:func:`verdict_sentence`)."""
    predicted = speed_words(adv.served_speedup) if adv.served_speedup is not None else "unknown"
    line = (f"Predicted from the last {adv.requests} requests: {predicted} "
            f"(measured when tuned: {adv.measured_speedup:.2f}×).")
    sentence = verdict_sentence(adv)
    return f"{line} {sentence}" if sentence else line


def verdict_sentence(adv: Advice) -> str:
    """The verdict (:attr:`~tuner.calibration.Advice.verdict`) in one sentence ("" for keep and too few
    requests)."""
    if adv.verdict == "shorter" and adv.best_n_max is not None:
        return (f"A shorter draft would be faster on these requests: n_max {adv.best_n_max} is predicted at "
                f"{adv.predicted[adv.best_n_max]:.2f}× (served: n_max {adv.served_n_max}).")
    if adv.verdict == "alone":
        return "The model alone would be faster on these requests (no speculation = 1.00×)."
    if adv.verdict == "longer" and adv.last_position_acceptance is not None:
        return (f"A longer draft might pay: {adv.last_position_acceptance:.0%} of the draft steps accepted all "
                f"{adv.served_n_max} drafted tokens.")
    return ""


def retune_action_text(budget_s: float) -> str:
    """The tray entry offered with advice: "Re-tune on recent requests (about 300 s)"."""
    return f"Re-tune on recent requests (about {budget_s:.0f} s)"


class LiveAdvice:
    """The live prediction of one app controller's served model (typed ``Any``: the controller's module imports
    the UI modules).

    Args:
        controller: the :class:`~tuner.ui.controller.AppController` (``serving``, ``collector``, ``settings``).
        store: where profiles are read (the default folder by default).
    """

    def __init__(self, controller: Any, store: ProfileStore | None = None) -> None:
        self.c = controller
        self.store = store if store is not None else ProfileStore()
        self._facts_for: tuple[Path, tuple[str, ...]] | None = None
        self._facts: ProfileFacts | None = None
        self._has_profile = False  # the served configuration's profile was read (with or without facts)
        self._notified: tuple[tuple[Path, tuple[str, ...]], str] | None = None

    def speculating(self) -> bool:
        """True while the model served (on a router: its current model, whose own process the Monitor reads,
        ``/metrics?model=ID``; the window is cleared when the router follows another one) speculates."""
        info = self.c.serving
        return info is not None and info.spec_label != "no speculation"

    def facts(self) -> ProfileFacts | None:
        """The served profile's facts, read once per served configuration; ``None``: none served, or the profile
        predates live predictions (or cannot be read)."""
        info = self.c.serving
        if info is None:
            return None
        key = (Path(info.target_path), tuple(info.argv))
        if key != self._facts_for:
            self._facts_for, self._facts = key, None
            try:
                profile = self.store.load(info.target_path, keep_aside=False)
            except (ProfileError, OSError):
                profile = None
            self._has_profile = profile is not None
            if profile is not None:
                self._facts = ProfileFacts.from_decision(profile.decision)
        return self._facts

    def advice(self) -> Advice | None:
        """The advice on the last requests served; ``None`` when not speculating or the profile has no facts."""
        facts = self.facts() if self.speculating() else None
        if facts is None:
            return None
        return advice_on_window(self.c.collector.spec_window.totals(), facts)

    def monitor_text(self) -> str | None:
        """The Monitor's line (:func:`prediction_line`), :data:`PREDATES` for an old profile, ``None`` (hidden)
        while no speculation is served or too few requests ran."""
        if not self.speculating():
            return None
        if self.facts() is None:
            return PREDATES if self._has_profile else None
        adv = self.advice()
        return None if adv is None or adv.verdict == "too_few" else prediction_line(adv)

    def offer(self) -> Advice | None:
        """The advice when it calls for a re-tune (not keep, not too few requests), else ``None``."""
        adv = self.advice()
        return adv if adv is not None and adv.offers_retune else None

    def notice(self) -> str | None:
        """The one notification of a verdict that calls for a re-tune: its sentence the first time that verdict is
        reached for the served configuration, ``None`` afterwards and otherwise (not repeated every tick)."""
        adv = self.offer()
        if adv is None or self._facts_for is None:
            return None
        mark = (self._facts_for, adv.verdict)
        if mark == self._notified:
            return None
        self._notified = mark
        return verdict_sentence(adv)

    def budget_s(self) -> float:
        """The time budget the re-tune would use (the settings' sweep budget), seconds."""
        return float(self.c.settings.tune_budget_s)


__all__ = ["PREDATES", "LiveAdvice", "prediction_line", "retune_action_text", "speed_words", "verdict_sentence"]
