"""What a sweep is asked to do, and what it reports back: :class:`TuneRequest`, :class:`TuneEvent`,
:class:`TuneResult`, :class:`TuneError`.

A request is built once, by the command line (``tuner.cli.tune.request_from_args``) or by the app
(:func:`request_from_settings`), and passed down unchanged to :func:`tuner.calibration.tune.tune`; both
front ends go through :meth:`TuneRequest.create`, so the same settings give the same request (a test
checks it). Every number's bounds and default are declared once, in :mod:`tuner.options`: the CLI's
``--help``, the app's Settings, the window and :meth:`TuneRequest.check` all read them from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import DraftwiseError
from tuner.options import OPTIONS, OptionError, check, machine_limits, option

from .prompts import PromptSet
from .sampling import SAMPLING_KEYS, Sampling

if TYPE_CHECKING:  # annotations only: these modules import nothing from here
    from tuner.profiles import Profile
    from tuner.settings import Settings

    from .candidates import Candidate, DroppedCandidate
    from .decide import Decision
    from .results import Measurement
    from .wording import Rendered

DEFAULT_BUDGET_S = float(option("budget_s").default or 0)
"""The one default time budget of a sweep, seconds, first launch to decision (CLI ``--budget``, the app's
``tune_budget_s``). 300 s, not the CLI's former 180 s: on a real model (Gemma 3 270M, ~30 tokens/s here) and
on a busy desktop, 180 s ran out before the paired rounds' sequential test could conclude on a 1.5× n-gram
effect, so the honest answer was "not enough evidence"; 300 s is what the app already used."""

DEFAULT_N_PREDICT = int(option("n_predict").default or 0)
"""Default generated tokens per measured request: closer to real answers than a few dozen tokens (the
budget planning shortens it for slow models)."""

DEFAULT_REPETITIONS = int(option("repetitions").default or 0)
"""Default repetitions: a finalist gets at most ``2 × repetitions`` adjacent pairs (at least
``tuner.calibration.pairing.MIN_PAIRS``); probes use one repetition."""


class TuneError(DraftwiseError, RuntimeError):
    """Tuning cannot start or cannot finish: no models, unknown target, no server, baseline failed.

    The message is for the user (names the folder, file or flag); ``evidence`` holds log lines or
    details when there are any. ``bad_input`` is True when the user's input is at fault (missing or
    empty folder, unknown target, bad ``--server`` path, bad budget): the CLI exits 2 for those, 1 otherwise.
    """

    def __init__(self, message: str, evidence: Sequence[str] = (), bad_input: bool = False) -> None:
        self.evidence = tuple(evidence)
        self.bad_input = bad_input
        super().__init__(message)


def _check_long_share(long_share: float | None, long_context: bool) -> None:
    """``long_share`` within its declaration (:mod:`tuner.options`), and above 0 only with the long-context
    requests in the sweep.

    Raises:
        TuneError: (``bad_input``) naming ``--long-share``.
    """
    try:
        check("long_share", long_share, where="--long-share")
    except OptionError as exc:
        raise TuneError(str(exc), bad_input=True) from None
    if long_share is not None and long_share > 0 and not long_context:
        raise TuneError(f"--long-share {long_share:g}: the sweep has no long-context requests to weigh "
                        "(--no-long-context); drop one of the two", bad_input=True)


@dataclass(frozen=True)
class TuneRequest:
    """One sweep's inputs, with units in the names and ``None`` for "automatic".

    Attributes:
        models_dir: folder of GGUF files (scanned with ``tuner.catalog.scan_folder``).
        target: target model by file name, stem or path; ``None`` = the largest LLM that has a
            compatible draft or head, else the largest LLM (``tuner.catalog.families.default_target``).
        prompts: a prompt file path, a :class:`PromptSet`, or ``None`` for the built-in set.
        budget_s: time budget in seconds (default :data:`DEFAULT_BUDGET_S`), first launch to decision. The
            first launch's warm-up gives the model's speed and load time, and the protocol (prompts ×
            ``n_predict`` × launches) is planned to fit; when even the smallest comparison does not fit, the
            ``"budget"`` event says so up front and names the budget that would.
        force: re-tune even when a fresh profile exists.
        server: llama-server path, used as is (a missing or non-executable path is a :class:`TuneError`
            naming ``--server``, never a fallback); ``None`` = discovered.
        n_predict: generated tokens per request (planned down from the warm-up's speed to fit the budget).
        repetitions: sets the most adjacent pairs per finalist (``2 × repetitions``).
        n_ctx: context size of every launch and of the saved profile (``-c``), tokens; ``None`` = automatic
            (:func:`tuner.ctxsize.default_ctx_size`). A staleness key of the profile.
        threads: CPU threads per launch (``None`` = the server's default).
        max_prompts: use at most this many prompts of the set (spread over categories); ``None`` = all of a
            file, 5 of the built-in set.
        sampling: the user's client settings (:class:`tuner.calibration.sampling.Sampling`); the empty
            ``Sampling()`` = llama-server's own defaults (requests send no sampling fields). Every request
            carries a seed fixed per (prompt, repetition); a short greedy pass is the lossless check.
        long_context: add the built-in long-context requests (a long document and a long code file with a
            question, each filling at least half of ``n_ctx``).
        chat: ``True``/``False`` forces ``/v1/chat/completions`` / ``/completion``; ``None`` = chat when the
            target GGUF has ``tokenizer.chat_template``.
        long_share: fraction (0..1) of the served requests that are long-context ones: the pick is the
            configuration fastest over that mix (each short request weighs ``(1 − share) ÷ n_short``, each
            long one ``share ÷ n_long``: ``tuner.calibration.pairing.Mix``) and the decision states it;
            ``None`` = the prompt set's own share (every request the same). A staleness key of the profile.
            Above 0 it needs ``long_context``.
        rpc_hosts: llama.cpp RPC hosts (``host:port``, each a ``ggml-rpc-server``) whose devices the target
            may use (``tuner.calibration.remote``: "target split local + remote, draft local" and "target
            local as far as it fits" per draft; the baseline over RPC). An unreachable host costs a few
            seconds and a note; the hosts and their devices are part of the profile's staleness keys.
            Empty = this machine only.
        server_args: the user's own llama-server flags as argv words (``("--no-repack", "-tb", "2")``, from
            ``tune --server-arg`` or the ``server_args`` setting through
            :func:`tuner.serverargs.parse_server_args`), added to every launch, the baseline's included, and
            saved with the winner; a staleness key of the profile. The sweep also refuses a flag the installed
            binary does not list (:func:`tuner.serverargs.check_known`).
        prompts_from_served: measure on the requests captured while serving the target (``tune
            --prompts-from-served``, the app's *Re-tune on recent requests*) instead of ``prompts``: each sent as
            llama-server logged it (after the chat template; a token array as token ids), as a raw completion, at
            ``sampling`` (the clients' own sampling is not recorded); the built-in long-context requests are not
            added (``long_context`` is ignored), and a captured prompt filling at least half of ``n_ctx`` counts as
            a long-context one for ``long_share``. At most ``max_prompts`` (default 8) of them, sampled evenly
            over time (:func:`tuner.calibration.prompts.captured_prompt_set`).
        served_model_id: the served model id whose captured requests are used (the ``--alias``); ``None`` = the
            target's default id (:func:`tuner.server.config.default_alias`).
    """

    models_dir: Path
    target: str | None = None
    prompts: Path | PromptSet | None = None
    budget_s: float = DEFAULT_BUDGET_S
    force: bool = False
    server: Path | None = None
    n_predict: int = DEFAULT_N_PREDICT
    repetitions: int = DEFAULT_REPETITIONS
    n_ctx: int | None = None
    threads: int | None = None
    max_prompts: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    long_context: bool = True
    chat: bool | None = None
    long_share: float | None = None
    rpc_hosts: tuple[str, ...] = ()
    server_args: tuple[str, ...] = ()
    prompts_from_served: bool = False
    served_model_id: str | None = None

    @classmethod
    def create(cls, models_dir: str | Path, **fields: Any) -> TuneRequest:
        """The one constructor both front ends use: normalises types (paths to ``Path``, a target path to
        its text, ``None`` sampling to llama-server's defaults, numbers to ``float``/``int``) and checks
        the numbers.

        Args:
            models_dir: the models folder.
            **fields: any other field of :class:`TuneRequest`; a value ``None`` where the field's default is
                not ``None`` (e.g. ``budget_s=None``) means that default.

        Raises:
            TuneError: (``bad_input``) an unknown field, or a number out of range (names the field).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise TuneError(f"unknown tune option(s): {', '.join(unknown)}", bad_input=True)
        defaults = cls(models_dir=Path(models_dir))
        values: dict[str, Any] = {}
        for name, value in fields.items():
            if value is None and getattr(defaults, name) is not None:
                continue
            values[name] = value
        if values.get("target") is not None:
            values["target"] = str(values["target"])
        prompts = values.get("prompts")
        if prompts is not None and not isinstance(prompts, PromptSet):
            values["prompts"] = Path(prompts)
        if values.get("server") is not None:
            values["server"] = Path(values["server"])
        for name in ("rpc_hosts", "server_args"):
            if values.get(name) is not None:
                values[name] = tuple(str(h) for h in values[name])
        budget = values.get("budget_s")
        if isinstance(budget, int) and not isinstance(budget, bool):
            values["budget_s"] = float(budget)
        request = dataclasses.replace(defaults, **values)
        request.check()
        return request

    def check(self) -> None:
        """Raise :class:`TuneError` (``bad_input``) naming the first field whose value cannot be used: each
        number against its declaration in :mod:`tuner.options` (``threads`` against this machine's logical
        CPUs), e.g. ``"budget_s 5: must be between 10 and 86400 seconds"``."""
        for opt in [o for o in OPTIONS.values() if o.in_request]:
            value = getattr(self.sampling if opt.name in SAMPLING_KEYS else self, opt.name)
            try:
                check(opt.name, value, where=opt.name, limits=machine_limits())
            except OptionError as exc:
                raise TuneError(str(exc), bad_input=True) from None
        _check_long_share(self.long_share, self.long_context or self.prompts_from_served)
        if self.prompts_from_served and self.prompts is not None:
            raise TuneError("--prompts-from-served replaces --prompts: give one of the two", bad_input=True)
        from tuner.serverargs import ServerArgError, check_server_argv

        try:
            check_server_argv(self.server_args, where="server_args")
        except ServerArgError as exc:
            raise TuneError(str(exc), bad_input=True) from None

    def to_json(self) -> dict[str, Any]:
        """JSON-able view (paths as text; a prompt set as its source), for logs and ``tune --json``."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, PromptSet):
                value = str(value.source or "<prompt set>")
            elif isinstance(value, Sampling):
                value = value.body()
            out[f.name] = value
        return out


def request_from_settings(settings: Settings, models_dir: str | Path, target: str | Path | None = None,
                          force: bool = False, server: str | Path | None = None,
                          options: Mapping[str, Any] | None = None) -> TuneRequest:
    """The app's request: the Settings' budget (``tune_budget_s``), context size (``ctx_size``), sampling
    (``temperature``, ``top_p``, ``top_k``, ``min_p``), long-context share (``long_share``), CPU threads
    (``threads``: None = the tune's thread stage chooses), RPC hosts
    (``rpc_hosts``), the user's llama-server flags (``server_args``, as argv words) and prompt file
    (``prompts_path``), then ``options``
    (field name → value, e.g. ``{"max_prompts": 2}``) over them.

    Args:
        settings: a :class:`tuner.settings.Settings`.
        models_dir: the models folder.
        target: the chosen target, or ``None`` for the default choice.
        force: re-tune even when a fresh profile exists.
        server: the llama-server binary the app found (``None`` = discover).
        options: overrides by field name.

    Raises:
        TuneError: an unknown option or a value out of range.
    """
    fields: dict[str, Any] = {
        "target": target,
        "prompts": settings.prompts_path,
        "budget_s": settings.tune_budget_s,
        "force": force,
        "server": server,
        "n_ctx": settings.ctx_size,
        "sampling": Sampling.from_settings(settings),
        "long_share": settings.long_share,
        "threads": settings.threads,
        "rpc_hosts": tuple(settings.rpc_hosts),
        "server_args": _setting_words(settings),
    }
    fields.update(options or {})
    return TuneRequest.create(models_dir, **fields)


def _setting_words(settings: Settings) -> tuple[str, ...]:
    """The ``server_args`` setting (``FLAG`` / ``FLAG=VALUE`` strings) as argv words.

    Raises:
        TuneError: (``bad_input``) a flag the rule refuses (named; the Settings validate it already).
    """
    from tuner.serverargs import ServerArgError, parse_server_args

    try:
        return parse_server_args(settings.server_args, where="server_args")
    except ServerArgError as exc:
        raise TuneError(str(exc), bad_input=True) from None


@dataclass(frozen=True)
class TuneEvent:
    """One progress report from :func:`tuner.calibration.tune.tune`, delivered to ``on_event``.

    Attributes:
        kind: what happened, one of:

            * ``"started"``: tuning began (``message`` names the target).
            * ``"reused"``: a fresh saved profile was found and is returned without measuring.
            * ``"stale"``: a saved profile exists but is stale (``message`` gives the reasons).
            * ``"plan"``: candidates planned (``message`` summarizes; ``detail["dropped"]`` lists
              dropped candidates with reasons).
            * ``"launch"``: a server is being started for ``candidate``.
            * ``"ready"``: that server is ready (``detail["load_s"]``).
            * ``"measured"``: ``measurement`` of ``candidate`` finished (may carry an ``error``).
            * ``"predicted"``: the long-draft probe predicted throughput for shorter drafts
              (``detail["curve"]`` = list of ``[n_max, acceptance, gen_tokens_per_s]``).
            * ``"skipped"``: a candidate was not measured (budget, predicted loser, dropped early);
              ``message`` says why.
            * ``"decision"``: ``decision`` is final.
            * ``"saved"``: the profile was written (``detail["profile_path"]``).
            * ``"cancelled"``: the cancel event was seen; tuning stopped cleanly.
            * ``"error"``: a non-fatal problem (``message``); fatal problems raise :class:`TuneError`.
            * ``"budget"``: the protocol planned from the first warm-up (``detail``: ``n_predict``,
              ``prompts``, ``load_s``, ``warmup_gen_tokens_per_s``, ``planned_s``, and
              ``budget_too_small`` / ``suggested_budget_s`` when the budget cannot hold one comparison).
            * ``"confirmed"``: a finalist's paired rounds ended (``detail["verdict"]``, ``["pairs"]``).
            * ``"progress"``: a request finished (for progress bars; ``message`` is short).
            * ``"status"``: a step of the app's one-click flow around the sweep (serving paused for a
              re-tune, the previous configuration back, the winner starting; ``tuner.ui.flow``): only
              ``message`` is set; ``tune`` itself never sends it.
        message: one line for humans.
        progress: 0.0–1.0 estimate of the work done (``None`` when unknown); never moves back and
            stays below 1.0 until the decision.
        elapsed_s: seconds since ``tune`` started.
        eta_s: estimated seconds left (``None`` until the first warm-up was timed); never more than the
            remaining budget plus the time to finish the current step.
        candidate: the candidate concerned, if any.
        measurement: the finished measurement (``"measured"``), if any.
        decision: the decision (``"decision"``), if any.
        detail: extra JSON-able data depending on ``kind``.
    """

    kind: str
    message: str
    progress: float | None = None
    elapsed_s: float = 0.0
    eta_s: float | None = None
    candidate: Candidate | None = None
    measurement: Measurement | None = None
    decision: Decision | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tuner.calibration.tune.tune` returns.

    Attributes:
        target_path: the target GGUF tuned.
        decision: the decision (``None`` only when cancelled before the baseline was measured).
        measurements: every measurement of this sweep (empty when a profile was reused).
        profile: the saved (or reused) profile; ``None`` when cancelled.
        profile_path: where the profile is on disk; ``None`` when cancelled.
        reused: True when a fresh saved profile was returned without measuring.
        cancelled: True when the cancel event stopped the sweep (nothing saved).
        dropped: candidates removed before launch, with reasons.
        elapsed_s: wall time of the call.
        request: the request this result answers.
    """

    target_path: Path
    decision: Decision | None
    measurements: tuple[Measurement, ...] = ()
    profile: Profile | None = None
    profile_path: Path | None = None
    reused: bool = False
    cancelled: bool = False
    dropped: tuple[DroppedCandidate, ...] = ()
    elapsed_s: float = 0.0
    request: TuneRequest | None = None

    def comparison_figures(self) -> list[dict[str, Any]]:
        """The decision's comparisons in their JSON form (``Comparison.to_json``: ``label``, ``speedup``,
        ``gen_tokens_per_s``, ``baseline_gen_tokens_per_s``, ``acceptance``, ``paired``, ``pairs``,
        ``requests``, ``stopped_early`` …): from this sweep, or for a reused profile as the profile saved
        them (a reused decision holds no samples to compare). The CLI's table and the app's chart."""
        d = self.decision
        if d is not None and d.comparisons:
            return [c.to_json() for c in d.comparisons]
        if self.reused and self.profile is not None:
            return [c for c in self.profile.decision.get("comparisons") or [] if isinstance(c, dict)]
        return []

    def rendered(self) -> Rendered:
        """The decision in words (:func:`tuner.calibration.wording.render` of its sentences): ``first`` is the
        plain first sentence (the app's decision line and notification, ``draftwise tune``'s ``Decision:``
        line), ``details`` the evidence and the rest (the app's *Details*, ``tune --details``). A reused
        profile's first detail says so, and its sentence about other programs is dated. Empty without a
        decision (cancelled)."""
        from .wording import Rendered, render

        if self.decision is None:
            return Rendered("", (), "")
        measured = self.profile.created_unix_s if self.reused and self.profile is not None else None
        return render(self.decision.sentences, measured_unix_s=measured, reused=self.reused)


EventCallback = Callable[[TuneEvent], None]
"""Receives each :class:`TuneEvent` on the thread that runs the sweep."""


__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_N_PREDICT",
    "DEFAULT_REPETITIONS",
    "EventCallback",
    "TuneError",
    "TuneEvent",
    "TuneRequest",
    "TuneResult",
    "request_from_settings",
]
