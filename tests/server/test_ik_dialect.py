"""The ik_llama.cpp dialect, from the ``--help`` of its ``llama-server`` built from the
``ik-llama-cpp-python`` 0.1.5 sdist (``vendor/ik_llama.cpp``, CPU, captured once): recognised, and
the exact argv for every candidate type in its syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import help_text
from tuner.calibration.candidates import Candidate, DraftOption, plan_candidates
from tuner.calibration.serving import candidate_config
from tuner.server.argv import UnsupportedConfigError, build_argv
from tuner.server.dialect import parse_help

IK = parse_help(help_text("ik-0.1.5"))
T = "/m/t.gguf"


def spec_part(c: Candidate) -> list[str]:
    argv = build_argv("srv", candidate_config(c, T).with_port(1), IK)
    return argv[argv.index("--spec-type"):]


def test_recognised_as_ik() -> None:
    assert IK.spec_style == "ik"
    assert IK.spec_types == ("none", "draft-simple", "draft-mtp", "ngram-cache", "ngram-simple", "ngram-map-k",
                             "ngram-map-k4v", "ngram-mod")
    assert IK.has_spec_autotune
    for flag in ("-md", "--draft-max", "--draft-min", "--draft-p-min", "-mtp", "--spec-ngram-size-m",
                 "--metrics", "-m", "--host", "--port", "-c", "-np", "-t", "-ctkd", "--no-slots"):
        assert IK.has(flag), flag
    # a CPU build of ik_llama.cpp does not list the GPU-offload flags (-ngl, -ngld) at all
    assert not IK.has("-ngl") and not IK.has("-ngld")
    assert not IK.has("--spec-draft-n-max") and not IK.has("--spec-draft-model")
    # the mainline fixtures are not mistaken for ik
    assert parse_help(help_text("b11434")).spec_style == "current"
    assert parse_help(help_text("legacy-4227c9b")).spec_style == "legacy"


def test_exact_argv_per_candidate_type() -> None:
    cases = {
        Candidate(): ["--spec-type", "none"],
        Candidate(spec_type="ngram-mod"): ["--spec-type", "ngram-mod"],
        Candidate(spec_type="ngram-mod", ngram_n_max=16, ngram_n_min=12):
            ["--spec-type", "ngram-mod", "--draft-max", "16", "--draft-min", "12"],
        Candidate(spec_type="ngram-simple", ngram_n_max=16): ["--spec-type", "ngram-simple",
                                                              "--spec-ngram-size-m", "16"],
        Candidate(spec_type="ngram-map-k", ngram_n_max=8): ["--spec-type", "ngram-map-k", "--spec-ngram-size-m", "8"],
        Candidate(spec_type="ngram-map-k4v"): ["--spec-type", "ngram-map-k4v"],
        Candidate(spec_type="ngram-cache"): ["--spec-type", "ngram-cache"],
        Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=6, p_min=0.0):
            ["--spec-type", "none", "-md", "/m/d.gguf", "--draft-max", "6", "--draft-p-min", "0"],
        Candidate(spec_type="draft-mtp", n_max=2, p_min=0.0):
            ["--spec-type", "none", "-mtp", "--draft-max", "2", "--draft-p-min", "0"],
        Candidate(spec_type="ngram-simple,draft-simple", draft_path="/m/d.gguf", n_max=4, ngram_n_max=24):
            ["--spec-type", "ngram-simple", "-md", "/m/d.gguf", "--draft-max", "4", "--spec-ngram-size-m", "24"],
        Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4):
            ["--spec-type", "ngram-mod", "-md", "/m/d.gguf", "--draft-max", "4"],
        Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", autotune=True):
            ["--spec-type", "none", "-md", "/m/d.gguf", "--spec-autotune"],
        Candidate(spec_type="ngram-mod", autotune=True): ["--spec-type", "ngram-mod", "--spec-autotune"],
    }
    for c, want in cases.items():
        assert spec_part(c) == want, c.label


def test_what_ik_cannot_express_is_refused_naming_the_flag() -> None:
    with pytest.raises(UnsupportedConfigError) as e:  # -mtp replaces --spec-type
        spec_part(Candidate(spec_type="ngram-mod,draft-mtp", n_max=2))
    assert "-mtp replaces --spec-type" in str(e.value)
    with pytest.raises(UnsupportedConfigError) as e:  # one --draft-max for ngram-mod and the draft
        spec_part(Candidate(spec_type="ngram-mod,draft-simple", draft_path="/m/d.gguf", n_max=4, ngram_n_max=24))
    assert e.value.flag == "--draft-max"
    with pytest.raises(UnsupportedConfigError) as e:
        spec_part(Candidate(spec_type="draft-eagle3", draft_path="/m/e.gguf", n_max=4))
    assert "draft-eagle3" in str(e.value)
    with pytest.raises(UnsupportedConfigError) as e:  # this CPU build has no -ngld
        spec_part(Candidate(spec_type="draft-simple", draft_path="/m/d.gguf", n_max=4, draft_ngl=0))
    assert e.value.flag == "-ngld"


def test_plan_on_ik_offers_autotune_and_drops_what_it_lacks() -> None:
    plan = plan_candidates(T, [DraftOption("/m/d.gguf")], spec_types=IK.spec_types, mtp_layers=1,
                           autotune=IK.has_spec_autotune, supports=IK.supports_spec_type)
    tuned = [c for c in plan.ngram if c.autotune]
    assert [(c.spec_type, c.draft_path) for c in tuned] == [
        ("ngram-mod", None), ("draft-simple", "/m/d.gguf"), ("draft-mtp", None)]
    # the MTP chain ik cannot express is dropped before launch, with the reason
    assert "ngram-mod,draft-mtp" in {d.candidate.spec_type for d in plan.dropped}
    assert [c.spec_type for c in plan.ngram if c.is_chained] == ["ngram-mod,draft-simple"]
    # every planned candidate builds an argv on ik
    for c in plan.all_probes:
        build_argv("srv", candidate_config(c, T).with_port(1), IK)


@pytest.mark.server
@pytest.mark.parametrize("candidate", [
    Candidate(spec_type="draft-simple", draft_path="SELF", n_max=4, p_min=0.0),
    Candidate(spec_type="ngram-simple,draft-simple", draft_path="SELF", n_max=4, ngram_n_max=8),
    Candidate(spec_type="draft-simple", draft_path="SELF", n_max=4, p_min=0.0, autotune=True),
], ids=["draft", "chain", "autotune"])
def test_real_ik_server_drafts_with_our_argv(candidate: Candidate, tmp_path: Path) -> None:
    """With the built ik_llama.cpp binary (DRAFTWISE_IK_LLAMA_SERVER), the argv we build for a
    candidate starts it and it drafts. ik_llama.cpp reports ``draft_n`` only on ``/v1/completions``
    (not ``/completion``) and has no ``/slots[].speculative``, so that is what is checked here."""
    import os
    from dataclasses import replace

    from tests.synth import raw_llama_server, stories_model_path
    from tuner.server.dialect import probe_dialect

    exe = os.environ.get("DRAFTWISE_IK_LLAMA_SERVER")
    if not exe or not Path(exe).is_file():
        pytest.skip("no ik_llama.cpp llama-server built here (set DRAFTWISE_IK_LLAMA_SERVER)")
    d = probe_dialect(exe)
    assert d.spec_style == "ik" and d.help_sha256 == IK.help_sha256
    model = str(stories_model_path())
    c = replace(candidate, draft_path=model)
    argv = build_argv(exe, candidate_config(c, model, n_ctx=512, threads=1).with_port(1), d)
    args = argv[1:]
    for flag in ("--host", "--port"):  # raw_llama_server picks its own
        j = args.index(flag)
        del args[j:j + 2]
    with raw_llama_server(exe, args, log=tmp_path / "ik.log") as client:
        body = client.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 48,
                                                    "temperature": 0}).json()
    t = body["timings"]
    assert t.get("draft_n", 0) > 0 and t.get("draft_n_accepted", 0) > 0, t


@pytest.mark.server
def test_doctor_self_test_on_real_ik(ik_llama_server_bin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``draftwise doctor`` on ik_llama.cpp: speculation confirmed from its start-up log, drafts counted
    from ``/v1/completions`` (its ``/completion`` answer has none)."""
    import json

    from tuner.cli import main as cli_main

    rc = cli_main(["doctor", "--json", "--server", str(ik_llama_server_bin), "--timeout", "60"])
    rep = json.loads(capsys.readouterr().out)
    st = rep["self_test"]
    assert rep["dialect"]["spec_style"] == "ik"
    assert rc == 0 and st["ok"] is True and st["speculative"] is True, st
    assert st["draft_n"] > 0 and st["draft_n_accepted"] > 0, st
