"""tuner.crosscheck: our memory plan checked against llama.cpp itself, and the build facts that need a run.

It sits above ``tuner.hardware`` and ``tuner.server`` (which never import each other): it builds the
server's argv for a plan and runs llama-server or ``llama-fit-params`` on this machine.

- server_check.py: :func:`~tuner.crosscheck.server_check.server_cross_check` (one real start up to "model
  loaded", cached) and :func:`~tuner.crosscheck.server_check.server_config_for` (the launch a plan describes).
- fit_params.py: :func:`~tuner.crosscheck.fit_params.cross_check` (``llama-fit-params``, no-alloc, about a second).
- lines.py: :func:`~tuner.crosscheck.lines.plan_check_lines` → typed ``CheckLine`` sentences under a plan.
- cpu_buffers.py: what the build does with quantized weights on this CPU (one probe launch, cached) and the
  recorded ``--no-repack`` workaround.
- build.py: :func:`~tuner.crosscheck.build.find_server_binary` and
  :func:`~tuner.crosscheck.build.build_probes` (the probes ``tuner.hardware.detect_devices`` is given).
"""
