"""Idle sleep of a served llama-server: when it is asleep, when it woke, and how long the reload took.

llama-server ``--sleep-idle-seconds N`` unloads the model after N seconds without a task and loads it again
at the next request (tools/server/server-queue.cpp ``server_queue::start_loop``: ``entering sleeping state``
/ ``exiting sleeping state``; tools/server/server-context.cpp ``handle_sleeping_state``: sleeping =
``destroy()`` of the model, the draft and the KV cache; waking = ``load_model`` again, and a reload that fails
is ``GGML_ABORT("failed to reload model after sleeping")``, a SIGABRT: :func:`tuner.server.diagnosis.diagnose`
names it ``wake_failed``). Metrics tasks do not reset its idle timer (``task_resets_idle_timer``).

Only :data:`tuner.server.client.NON_WAKING_PATHS` are answered while asleep; :class:`SleepWatch` asks
``GET /props`` (``is_sleeping``, server-context.cpp ``get_res_props``) through a client limited to them.
While a reload runs, ``/props`` waits for it (``server_queue::is_sleeping`` takes the queue's lock, which the
reload holds), so the answer that says "awake" comes when the model is loaded.

The reload time is measured from the log's ``exiting sleeping state`` line to the first ``processing task``
line after it (server-context.cpp ``launch_slot_with_task``: the request that woke it starts), or to the
``/props`` answer that says awake when no task followed (a wake by ``/slots``). The times are the log's own
timestamps where the lines carry them (common/log.cpp prints ``M.SS.mmm.uuu`` since start by default;
llama.cpp's log thread may hand several lines over at once), else when the lines were read.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tuner.server.client import NON_WAKING_PATHS, ServerClient, ServerClientError

log = logging.getLogger(__name__)

#: Log text of server_queue::start_loop when the model is unloaded / loaded again.
ENTER_LINE = "entering sleeping state"
EXIT_LINE = "exiting sleeping state"
#: Log text of the first request's start after a wake (server-context.cpp ``launch_slot_with_task``).
TASK_LINE = "processing task"
#: common/log.cpp's timestamp prefix ``M.SS.mmm.uuu`` (minutes, seconds, ms, µs since start), maybe coloured.
_LOG_TIME = re.compile(r"^(?:\x1b\[[0-9;]*m)?(\d+)\.(\d{2})\.(\d{3})\.(\d{3})\b")
#: Seconds one ``/props`` request may take while awake or asleep (it is answered from the HTTP thread).
PROPS_TIMEOUT_S = 2.0
#: Seconds one ``/props`` request may wait while the model loads again (it answers when the load is done).
WAKING_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SleepStatus:
    """Where a served llama-server stands with idle sleep.

    Fields:
        sleeping: the model is unloaded now (or being loaded again: ``waking``).
        waking: a request arrived while asleep and the model is loading again.
        since_unix_s: ``time.time()`` when it fell asleep (None while awake).
        last_reload_s: seconds the last wake took, from the log's wake line to the start of the request that
            woke it (None before the first wake).
        sleeps: how many times it fell asleep since the launch.
    """

    sleeping: bool = False
    waking: bool = False
    since_unix_s: float | None = None
    last_reload_s: float | None = None
    sleeps: int = 0


@dataclass(frozen=True)
class SleepEvent:
    """A change :class:`SleepWatch` saw: ``asleep`` True when the model was unloaded, False when it is loaded
    again; ``status`` after the change; ``message``, one line for people."""

    asleep: bool
    status: SleepStatus
    message: str


#: The line said when a request woke a sleeping server (the model is loading again).
WAKING_MESSAGE = "waking up — a request arrived, the model is loading again"


def asleep_message(idle_s: int | None) -> str:
    """The line said when the server fell asleep."""
    after = f"no request for {idle_s} s" if idle_s else "no request for a while"
    return f"sleeping — memory freed ({after}: the model is unloaded until the next request loads it again)"


def awake_message(reload_s: float | None) -> str:
    """The line said when the server woke: the first request's reload time when it was measured."""
    if reload_s is None:
        return "awake: the model is loaded again"
    return f"awake: the first request waited {reload_words(reload_s)} while the model loaded again"


def reload_words(reload_s: float) -> str:
    """A reload time in words: ``"2.1 s"``, or ``"40 ms"`` below a second."""
    return f"{reload_s:.1f} s" if reload_s >= 1.0 else f"{reload_s * 1000:.0f} ms"


def log_time_s(line: str) -> float | None:
    """Seconds since the server started, from the line's common/log.cpp timestamp; None without one."""
    m = _LOG_TIME.match(line)
    if m is None:
        return None
    minutes, secs, ms, us = (int(g) for g in m.groups())
    return minutes * 60 + secs + ms / 1e3 + us / 1e6


class SleepWatch:
    """Follows one launch's idle sleep (see the module docstring). Thread use: :meth:`on_line` runs on the
    log reader's thread, :meth:`poll` and :meth:`close` on the supervisor's monitor thread.

    Args:
        base_url: ``http://host:port`` of the launch.
        api_key: the endpoint's key (``/props`` needs it), or None.
        idle_s: the ``--sleep-idle-seconds`` value (for the words).
        interval_s: seconds between ``/props`` requests while nothing in the log says the state changed.
        clock: monotonic seconds (tests inject one).
    """

    def __init__(self, base_url: str, api_key: str | None, idle_s: int | None, interval_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_url, self.api_key, self.idle_s = base_url, api_key, idle_s
        self.interval_s = max(0.1, float(interval_s))
        self.clock = clock
        self.status = SleepStatus()
        self._lock = threading.Lock()
        self._hint = False  # the log says the state changed: ask /props at the next poll
        # when the log said "exiting sleeping state" (this wake) and the first "processing task" after it:
        # (clock when read, the line's own timestamp or None)
        self._wake_t: tuple[float, float | None] | None = None
        self._task_t: tuple[float, float | None] | None = None
        self._next_t = clock() + self.interval_s
        self._client: ServerClient | None = None

    def on_line(self, line: str) -> None:
        """One log line of the launch (the reader thread's callback)."""
        if EXIT_LINE in line:  # server_queue::start_loop's line, then handle_sleeping_state's: the first counts
            with self._lock:
                if self._wake_t is None:
                    self._wake_t, self._task_t = (self.clock(), log_time_s(line)), None
                self._hint = True
        elif ENTER_LINE in line:
            with self._lock:
                self._hint = True
        elif TASK_LINE in line:
            with self._lock:
                if self._wake_t is not None and self._task_t is None:
                    self._task_t = (self.clock(), log_time_s(line))

    @property
    def waking(self) -> bool:
        """True while a wake the log announced is not over (the model is loading again)."""
        with self._lock:
            return self.status.sleeping and self._wake_t is not None

    def wake_began(self) -> bool:
        """True once per wake, when the log said a request woke the model and :attr:`status` did not say so
        yet (it says ``waking`` from now on)."""
        if not self.waking or self.status.waking:
            return False
        self.status = replace(self.status, waking=True)
        return True

    def _props_sleeping(self, timeout_s: float) -> bool | None:
        """``/props`` ``is_sleeping``; None when it did not answer (the liveness check handles silence)."""
        if self._client is None:
            self._client = ServerClient(self.base_url, api_key=self.api_key, timeout_s=timeout_s,
                                        paths=NON_WAKING_PATHS)
        try:
            props = self._client.props(timeout_s=timeout_s)
        except ServerClientError:
            log.debug("/props did not answer (idle-sleep check)", exc_info=True)
            return None
        return props.get("is_sleeping") is True if isinstance(props, dict) else None

    def poll(self) -> SleepEvent | None:
        """Ask ``/props`` when due (every ``interval_s``, at once after a sleep or wake line); the change,
        else None. While the model loads again the request waits for the load (up to
        :data:`WAKING_TIMEOUT_S`)."""
        now = self.clock()
        with self._lock:
            due, self._hint = self._hint or now >= self._next_t, False
        if not due:
            return None
        waking = self.waking
        self.wake_began()
        asleep = self._props_sleeping(WAKING_TIMEOUT_S if waking else PROPS_TIMEOUT_S)
        self._next_t = self.clock() + self.interval_s
        if asleep is None or asleep == self.status.sleeping:
            return None
        if asleep:
            with self._lock:
                self._wake_t = self._task_t = None
            self.status = replace(self.status, sleeping=True, waking=False, since_unix_s=time.time(),
                                  sleeps=self.status.sleeps + 1)
            return SleepEvent(True, self.status, asleep_message(self.idle_s))
        with self._lock:
            start, end = self._wake_t, self._task_t
            self._wake_t = self._task_t = None
        reload_s = _reload_s(start, end, self.clock())
        self.status = replace(self.status, sleeping=False, waking=False, since_unix_s=None,
                              last_reload_s=reload_s if reload_s is not None else self.status.last_reload_s)
        return SleepEvent(False, self.status, awake_message(reload_s))

    def close(self) -> None:
        """Close the ``/props`` client (errors are logged at DEBUG)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                log.debug("closing the idle-sleep client failed", exc_info=True)


def _reload_s(start: tuple[float, float | None] | None, end: tuple[float, float | None] | None,
              now: float) -> float | None:
    """Seconds from the wake line ``start`` to the task line ``end`` (their log timestamps when both have one,
    else when they were read), or to ``now`` when no task line came; None without a wake line."""
    if start is None:
        return None
    if end is not None and start[1] is not None and end[1] is not None:
        return max(0.0, end[1] - start[1])
    return max(0.0, (end[0] if end is not None else now) - start[0])


__all__ = ["ENTER_LINE", "EXIT_LINE", "WAKING_MESSAGE", "SleepEvent", "SleepStatus", "SleepWatch", "asleep_message", "awake_message",
           "log_time_s", "reload_words"]
