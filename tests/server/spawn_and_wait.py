"""Helper process for the parent-SIGKILL test (not a test module).

Usage: python -m tests.server.spawn_and_wait BINARY MODEL
Starts a supervised llama-server from a short-lived worker thread, prints one JSON line
``{"server_pid": N, "base_url": U}`` when ready, then sleeps until killed.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from tuner.server.config import ServerConfig
from tuner.server.supervisor import Supervisor


def main() -> None:
    binary, model = sys.argv[1], sys.argv[2]
    sup = Supervisor(binary)
    box: dict = {}

    def worker() -> None:
        sup.start(ServerConfig(model_path=model, n_ctx=256, threads=1))
        box["url"] = sup.wait_ready(timeout_s=120)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    print(json.dumps({"server_pid": sup.pid, "base_url": box.get("url")}), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
