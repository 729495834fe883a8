"""A tiny stand-in for llama-server, for faults the real one will not produce on demand.

It accepts llama-server's argv (``-m``, ``--host``, ``--port``; other flags are ignored), answers
``--help`` with the captured b11434 help text and ``--version`` with a b11434 version line, logs
in llama.cpp's style to stderr, and serves ``/health``, ``/props``, ``/slots``, ``/metrics``,
``/completion``. Behaviour is chosen with fake-only flags (pass them as ServerConfig.extra_args):

    --fake-mode normal            /health 503 "Loading model" for --fake-load-s seconds, then 200
    --fake-mode loading-forever   /health 503 forever (a load hang)
    --fake-mode oom-on-completion /health 200, then the first /completion prints a CUDA
                                  out-of-memory line and aborts (SIGABRT)
    --fake-mode crash-after-ready SIGSEGV-like exit (abort) --fake-crash-s seconds after ready
    --fake-mode sigill-on-completion  /health 200, then the first /completion dies by SIGILL (a CPU
                                  that rejects an instruction on the first decode), unless --no-repack
    --fake-model-path P           report P as /props model_path (a foreign server)
    --fake-load-s S               seconds of "Loading model" (default 0)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HELP_FILE = Path(__file__).resolve().parent.parent / "server" / "data" / "llama-server-help-b11434.txt"


def log(level: str, comp: str, func: str, msg: str) -> None:
    sys.stderr.write(f"0.00.000.000 {level} {comp} {func:>12}: {msg}\n")
    sys.stderr.flush()


def parse(argv: list[str]) -> dict:
    opts = {"model": None, "host": "127.0.0.1", "port": 8080, "mode": "normal", "load_s": 0.0,
            "model_path": None, "crash_s": 1.0, "spec_type": "none", "draft": None, "no_repack": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in ("-h", "--help", "--usage"):
            sys.stdout.write(HELP_FILE.read_text(encoding="utf-8"))
            sys.exit(0)
        if a == "--list-devices":
            sys.stdout.write("Available devices:\n  (none)\n")
            sys.exit(0)
        if a == "--version":
            sys.stderr.write("version: 11434 (fa4e1ce)\nbuilt with fake for testing\n")
            sys.exit(0)
        keys = {"-m": "model", "--model": "model", "--host": "host", "--port": "port",
                "--fake-mode": "mode", "--fake-load-s": "load_s", "--fake-model-path": "model_path", "--fake-crash-s": "crash_s",
                "--spec-type": "spec_type", "-md": "draft", "--spec-draft-model": "draft"}
        if a in ("--no-repack", "-nr"):
            opts["no_repack"] = True
        if a in keys and nxt is not None:
            opts[keys[a]] = nxt
            i += 2
            continue
        i += 1
    opts["port"] = int(opts["port"])
    opts["load_s"] = float(opts["load_s"])
    opts["crash_s"] = float(opts["crash_s"])
    return opts


def _die_by(sig: int, last_line: str) -> None:
    """Log ``last_line`` and die by ``sig`` in the calling thread, as a real fault kills the thread that hit
    it, leaving no core file (non-dumpable, RLIMIT_CORE 0). Never returns.

    The signal goes to this thread (``pthread_kill``), not to the process: a process-directed core-dumping
    signal (SIGILL, SIGSEGV) is taken by whichever thread the kernel picks, here the sleeping main thread,
    while this one runs on; on a busy machine a request handler then answered 200 before the process
    died, and the readiness completion of a "crash on the first decode" passed."""
    sys.stderr.write(last_line + "\n")
    sys.stderr.flush()
    try:
        import ctypes
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (ImportError, OSError, ValueError, AttributeError):
        pass
    signal.pthread_kill(threading.get_ident(), sig)  # Python leaves SIGILL/SIGSEGV at their default action
    while True:  # not reached: the signal is taken on the way out of pthread_kill
        time.sleep(3600)


def main() -> int:
    opts = parse(sys.argv[1:])
    t0 = time.monotonic()
    mode = opts["mode"]
    state = {"completions": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:  # quiet
            pass

        def _send(self, code: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _loading(self) -> bool:
            return mode == "loading-forever" or time.monotonic() - t0 < opts["load_s"]

        def do_GET(self) -> None:  # noqa: N802
            if self._loading():
                self._send(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
                return
            if self.path.startswith("/health"):
                self._send(200, {"status": "ok"})
            elif self.path.startswith("/props"):
                self._send(200, {"model_path": opts["model_path"] or opts["model"], "total_slots": 1,
                                 "build_info": "b11434-fake"})
            elif self.path.startswith("/slots"):
                spec = opts["spec_type"] not in ("none", None) and bool(opts["draft"])
                self._send(200, [{"id": 0, "n_ctx": 256, "speculative": spec, "is_processing": False}])
            elif self.path.startswith("/metrics"):
                body = b"llamacpp:prompt_tokens_total 0\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self._send(404, {"error": {"code": 404, "message": "File Not Found"}})

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            if self._loading():
                self._send(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
                return
            if self.path.startswith("/completion"):
                state["completions"] += 1
                if mode == "oom-on-completion":
                    sys.stderr.write("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on "
                                     "device 0: cudaMalloc failed: out of memory\n")
                    sys.stderr.write("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2147483648\n")
                    sys.stderr.flush()
                    os.abort()
                if mode == "sigill-on-completion" and not opts["no_repack"]:
                    _die_by(signal.SIGILL, "I slot launch_slot_: id  0 | task 0 | processing task")
                k = int(req.get("n_predict", 4))
                self._send(200, {"content": " there was" * max(1, k // 2), "tokens_predicted": k,
                                 "timings": {"predicted_n": k, "predicted_per_second": 100.0,
                                             "prompt_per_second": 1000.0}})
            else:
                self._send(404, {"error": {"code": 404, "message": "File Not Found"}})

    log("I", "srv", "load_model", f"loading model '{opts['model']}'")
    try:
        httpd = ThreadingHTTPServer((opts["host"], opts["port"]), Handler)
    except OSError:
        log("E", "srv", "start", f"couldn't bind HTTP server socket, hostname: {opts['host']}, port: {opts['port']}")
        log("E", "srv", "llama_server", "exiting due to HTTP server error")
        return 1
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def announce() -> None:
        while mode != "loading-forever" and time.monotonic() - t0 < opts["load_s"]:
            time.sleep(0.05)
        if mode != "loading-forever":
            log("I", "srv", "llama_server", "model loaded")
            log("I", "srv", "llama_server", f"listening on http://{opts['host']}:{opts['port']}")
        if mode == "crash-after-ready":
            time.sleep(opts["crash_s"])
            sys.stderr.write("Segmentation fault (fake)\n")
            sys.stderr.flush()
            os.abort()

    threading.Thread(target=announce, daemon=True).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.exit(main())
