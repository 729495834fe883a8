"""One launchable llama-server configuration (pure data, no I/O).

A :class:`ServerConfig` says *what* to serve (target, optional draft, speculation type and its
knobs, memory placement, where to listen); :func:`tuner.server.argv.build_argv` turns it into the
exact argv for one binary's flag dialect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tuner.catalog.split import SPLIT_NAME, split_shard_paths


@dataclass(frozen=True)
class ServerConfig:
    """A single llama-server launch.

    Fields (``None`` = leave the server's default):
        model_path: target GGUF (first shard for split models).
        draft_path: draft GGUF for ``draft-*`` speculation types (``-md``), else None.
        spec_type: speculation type as llama-server spells it (``"none"``, ``"draft-simple"``,
            ``"draft-mtp"``, ``"ngram-mod"``, …; a comma list is allowed). ``None`` means
            ``"none"`` and is still passed explicitly where the binary has ``--spec-type``.
        n_max: draft length (``--spec-draft-n-max`` for draft-* types, the type's own
            ``size-m`` / ``n-max`` flag for n-gram types; ignored by ``ngram-cache``, fixed at 8).
        n_min: minimum draft length (``--spec-draft-n-min`` / ``--spec-ngram-mod-n-min``).
        ngram_n_max: draft length of the n-gram component (``--spec-ngram-<type>-size-m`` /
            ``--spec-ngram-mod-n-max``). When None, a config without a ``draft-*`` type uses ``n_max``
            for its n-gram types (so ``spec_type="ngram-mod", n_max=16`` works); a chained config
            (``"ngram-mod,draft-simple"``) keeps the two lengths apart: ``n_max`` is the draft's only.
        ngram_n_min: minimum n-gram draft (``--spec-ngram-mod-n-min``), same fallback as ``ngram_n_max``.
        spec_autotune: adapt the draft length at run time (ik_llama.cpp ``--spec-autotune``; the
            lengths above are then only its starting point). Only for binaries that list the flag.
        p_min: stop drafting when the draft's top-1 probability is below this (0..1).
        ngl: target GPU layers: an int, ``"auto"`` or ``"all"``.
        draft_ngl: draft GPU layers (``--spec-draft-ngl`` / legacy ``-ngld``).
        n_ctx: context size in tokens (``-c``).
        n_parallel: server slots (``-np``); 1 for speculative configurations (each slot needs
            draft state; the server's own default is 4).
        host: address to bind; ``127.0.0.1`` by default.
        port: TCP port; ``None`` = the supervisor picks a free one.
        api_key: clients must send it; the supervisor passes it as ``--api-key-file`` (a private
            file removed once the server is up) where the binary has that flag, else ``--api-key``.
        cache_type_k / cache_type_v: target KV cache types (``-ctk`` / ``-ctv``), e.g. ``"q8_0"``.
        threads: CPU threads (``-t``); with a separate draft model the draft's threads too (``-td``,
            b11434's alias of ``--spec-draft-threads``: common/arg.cpp), so both follow one thread setting.
        omp_passive: run llama-server with ``OMP_WAIT_POLICY=PASSIVE`` in its environment
            (:func:`tuner.server.argv.server_env`): on a build whose CPU backend uses OpenMP (``system_info: …
            OPENMP = 1``) the threads then sleep at each graph node's barrier instead of spinning
            (ggml/src/ggml-cpu/ggml-cpu.c ``ggml_barrier`` is an ``omp barrier`` there), so one thread
            preempted by another program no longer stalls the others at full spin. The only variable a
            configuration may set; part of a profile (the tune's thread stage chooses it).
        poll: ``--poll N`` (0..100, ggml's own threadpool: how long idle threads spin before they sleep;
            b11434's default 50); 0 = no polling. Changes nothing on an OpenMP build. None = not passed.
        fit: ``True``/``False`` → ``--fit on|off`` where the binary has ``--fit``; None = default.
        alias: model name the API reports (``--alias``: ``/v1/models`` ids and every answer's
            ``model`` field; tools/server/server-context.cpp uses the model path without it). The
            serving paths set :func:`default_alias`; None = not passed (the calibration sweep).
        cache_ram_mib: limit of llama-server's host-RAM prompt cache in MiB (``--cache-ram``;
            b11434's default is 8192, ``-1`` = no limit, ``0`` = off); None = the server's default.
        extra_args: appended verbatim at the end of the argv (expert escape hatch; a profile's
            are checked against an allow-list, tuner.calibration.serving).
        cors_origins: ``--cors-origins`` value where the binary has the flag. ``"localhost"``
            (default) admits only pages served from localhost / 127.0.0.1 / ::1 on any port
            (tools/server/server-http.cpp ``origin_is_localhost``); any other value is sent
            verbatim as ``Access-Control-Allow-Origin``, so it must be one origin; ``None`` leaves
            the server's own default ``*``, which echoes any Origin with credentials.
        rpc: llama.cpp RPC hosts (``host:port``) whose devices this launch uses (``--rpc a,b``; they are
            registered as ``RPC0``… and come first in the device order: src/llama.cpp
            ``llama_model_load_from_file_impl``); empty = this machine only.
        no_repack: ``--no-repack`` (b11434: ``--repack, -nr, --no-repack``, common/arg.cpp; sets
            ``use_extra_bufts`` false, so src/llama-model.cpp ``make_cpu_buft_list`` adds none of
            ggml-cpu's extra buffer types: no AMX, no CPU_REPACK weights). Set by the supervisor from a
            recorded machine fact (:mod:`tuner.server.workarounds`) on a CPU that crashes in those kernels;
            never on a machine where they work.
        sleep_idle_s: idle sleep (``--sleep-idle-seconds N``, whole seconds ≥ 1; None = off): after N seconds
            without a task llama-server unloads the model, draft and KV cache, and loads them again at the next
            request (tools/server/server-queue.cpp ``server_queue::start_loop``, server-context.cpp
            ``handle_sleeping_state``). A serving setting, never part of a profile; passed only where the binary
            lists the flag (:attr:`tuner.server.dialect.Dialect.has_idle_sleep`).
        log_prompts_dir: the private folder where llama-server writes each completion's prompt
            (``--log-prompts-dir``; tools/server/server-context.cpp, the ``path_prompts_log_dir`` block of
            ``server_routes::handle_completions_impl``): the opt-in capture of served requests
            (:mod:`tuner.server.capture` makes the folder and prunes it while serving). A serving setting, never
            part of a profile; None = off, and the argv never carries the flag.
    """

    model_path: Path
    draft_path: Path | None = None
    spec_type: str | None = None
    n_max: int | None = None
    n_min: int | None = None
    p_min: float | None = None
    ngl: int | str | None = None
    draft_ngl: int | str | None = None
    n_ctx: int | None = None
    n_parallel: int | None = 1
    host: str = "127.0.0.1"
    port: int | None = None
    api_key: str | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    threads: int | None = None
    fit: bool | None = None
    alias: str | None = None
    cache_ram_mib: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    cors_origins: str | None = "localhost"
    ngram_n_max: int | None = None
    ngram_n_min: int | None = None
    spec_autotune: bool = False
    rpc: tuple[str, ...] = ()
    no_repack: bool = False
    sleep_idle_s: int | None = None
    log_prompts_dir: Path | None = None
    omp_passive: bool = False
    poll: int | None = None

    def __post_init__(self) -> None:
        for name in ("no_repack", "omp_passive"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"ServerConfig.{name} must be true or false, not {getattr(self, name)!r}")
        if self.poll is not None and (isinstance(self.poll, bool) or not 0 <= self.poll <= 100):
            raise ValueError(f"ServerConfig.poll must be 0 to 100 (--poll), not {self.poll!r}")
        object.__setattr__(self, "model_path", Path(self.model_path))
        object.__setattr__(self, "rpc", tuple(str(h) for h in self.rpc))
        if self.draft_path is not None:
            object.__setattr__(self, "draft_path", Path(self.draft_path))
        if self.log_prompts_dir is not None:
            object.__setattr__(self, "log_prompts_dir", Path(self.log_prompts_dir))
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    @property
    def spec_types(self) -> tuple[str, ...]:
        """The speculation types as a tuple, without ``none`` (empty = no speculation)."""
        if not self.spec_type:
            return ()
        parts = [p.strip() for p in self.spec_type.split(",") if p.strip()]
        return tuple(p for p in parts if p != "none")

    @property
    def is_speculative(self) -> bool:
        """True when any speculation type other than ``none`` is requested."""
        return bool(self.spec_types)

    def with_port(self, port: int) -> ServerConfig:
        """Return a copy listening on ``port``."""
        return replace(self, port=port)

    def model_bytes(self) -> int:
        """Bytes of target + draft files on disk (all split shards of the target); 0 if missing."""
        total = 0
        for p in (self.model_path, self.draft_path):
            if p is None:
                continue
            for shard in split_shard_paths(p):
                try:
                    total += shard.stat().st_size
                except OSError:
                    continue
        return total


def default_alias(model_path: Path | str) -> str:
    """The friendly model id served as ``--alias``: the file name without ``.gguf``, and for a
    split set without its shard suffix (``Qwen3-8B-Q4_K_M-00001-of-00003.gguf`` → ``Qwen3-8B-Q4_K_M``;
    llama.cpp's shard names come from src/llama.cpp ``llama_split_path``, see
    :mod:`tuner.catalog.split`). Shape: a non-empty string. Raises nothing.
    """
    name = Path(model_path).name
    m = SPLIT_NAME.match(name)
    if m and int(m.group("count")) >= 2:
        return m.group("stem")
    stem = name[:-5] if name.lower().endswith(".gguf") else Path(name).stem
    return stem or name
