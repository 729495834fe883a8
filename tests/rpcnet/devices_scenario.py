"""Run inside a network namespace (tests/rpcnet.run_in_netns): two real RPC hosts, a closed port, a
silent host and a blackholed address; ``draftwise devices --rpc ... --json`` and a busy host. Prints one
JSON object with what was seen and how long each step took."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from tests.rpcnet import SilentHost
from tuner.crosscheck.build import find_server_binary
from tuner.hardware.devices import detect_devices
from tuner.hardware.rpc import rpc_server_binary
from tuner.hardware.rpchost import RpcHost, RpcHostConfig
from tuner.process import free_port


def main() -> int:
    binary = find_server_binary()
    rpc_bin = rpc_server_binary(binary)
    assert binary is not None and rpc_bin is not None
    subprocess.run(["ip", "route", "add", "blackhole", "10.99.0.0/16"], check=True)
    hosts = [RpcHost(RpcHostConfig(rpc_bin, port=free_port(), threads=1)) for _ in range(2)]
    for h in hosts:
        h.start()
    closed = free_port()
    silent = SilentHost()
    out: dict = {"hosts": [str(h.cfg.endpoint) for h in hosts], "closed": f"127.0.0.1:{closed}",
                 "silent": f"127.0.0.1:{silent.port}", "blackholed": "10.99.0.1:50052"}
    try:
        rpc = ",".join(out["hosts"] + [out["closed"], out["silent"], out["blackholed"]])
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "tuner", "devices", "--json", "--rpc", rpc], capture_output=True,
                           text=True, timeout=60)
        out["devices_s"] = time.monotonic() - t0
        out["devices_rc"] = p.returncode
        out["devices"] = json.loads(p.stdout) if p.returncode == 0 else p.stderr
        # The memory plan over both hosts (no model load): the target's layers split over RPC0 and RPC1
        from tests.synth import stories_model_path

        p = subprocess.run([sys.executable, "-m", "tuner", "plan", "--target", str(stories_model_path()), "--json",
                            "--rpc", ",".join(out["hosts"])], capture_output=True, text=True, timeout=60)
        out["plan_rc"] = p.returncode
        out["plan"] = json.loads(p.stdout) if p.stdout.strip().startswith("{") else p.stderr
        # Busy: a client holds host 0 (an RPC server serves one client at a time).
        hold = socket.create_connection(("127.0.0.1", hosts[0].cfg.port), timeout=2)
        t0 = time.monotonic()
        busy = detect_devices(binary, rpc_hosts=out["hosts"])
        out["busy_s"] = time.monotonic() - t0
        out["busy"] = {"names": [d.name for d in busy.devices], "endpoints": list(busy.rpc_endpoints),
                       "notes": list(busy.notes)}
        hold.close()
    finally:
        silent.close()
        for h in hosts:
            h.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
