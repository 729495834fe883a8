"""Settings and state files (issue 27, item 6).

- the ``cors_origin`` setting is matched whole: ``"http://localhost:3000\\n"`` passed a ``$``-anchored pattern
  and reached ``--cors-origins`` (an RPC host with a trailing newline, the same pattern, too);
- settings, profiles and the scan cache are read with a size limit per kind (1 MiB, 32 MiB, 64 MiB): a
  512 MiB sparse ``settings.json`` took a command to 1,042 MiB; now the command's peak memory is within 10 MB
  of the same command on a normal settings file, and the file is left as it was;
- each repair of a bad key kept another ``settings.json.invalid-<time>`` (53 after 40 cycles) and interrupted
  writes left ``.settings.json.*.tmp`` files for ten minutes: the newest 5 of each are kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.synth import write_llama_gguf
from tuner import settings as S
from tuner import storage
from tuner.profiles.profile import ProfileError
from tuner.profiles.store import MAX_PROFILE_BYTES, ProfileStore
from tuner.rpcaddr import RpcHostError, parse_rpc_hosts

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTWISE_HOME", str(home))
    return home


def _write_settings(obj: object) -> Path:
    p = S.settings_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj))
    return p


# ------------------------------------------------------------------ origins matched whole


@pytest.mark.parametrize("origin", ["http://localhost:3000\n", "http://localhost:3000\r\n", "http://a.example\n"])
def test_an_origin_with_a_trailing_newline_is_refused(origin: str) -> None:
    with pytest.raises(S.SettingsError, match="cors_origin"):
        S.Settings(cors_origin=origin)
    _write_settings({"cors_origin": origin, "port": 9123})
    loaded = S.load_settings_keeping_valid(repair=False)
    assert [e.key for e in loaded.problems] == ["cors_origin"] and loaded.settings.port == 9123
    assert S.served_values()[0] == "localhost"  # what --cors-origins gets: the locked-down default
    assert S.Settings(cors_origin=origin.strip()).cors_origins_value() == origin.strip()


def test_an_rpc_host_with_a_newline_is_refused() -> None:
    with pytest.raises(RpcHostError, match="not an IPv4 address or host name"):
        parse_rpc_hosts(["localhost\n:50052"])
    with pytest.raises(S.SettingsError, match="rpc_hosts"):
        S.Settings(rpc_hosts=("localhost\n:50052",))


# ------------------------------------------------------------------ size limits


def _peak_rss_kib(argv: list[str], home: Path) -> tuple[int, int, str]:
    """Exit status, peak RSS (KiB, the child's own: os.wait4) and stderr of ``python -m tuner ARGV``."""
    env = dict(os.environ, PYTHONPATH=str(REPO), DRAFTWISE_HOME=str(home))
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "tuner", *argv], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return p.returncode, usage.ru_maxrss, err.read().decode()


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="a child's own peak RSS needs os.wait4 (POSIX)")
def test_a_512_mib_sparse_settings_file_costs_no_memory_and_is_kept(tmp_path: Path, _home: Path) -> None:
    """``serve --target MISSING`` reads the settings three times (rpc_hosts, server_args, the served values)
    before it refuses the missing file: the same command, a normal and a 512 MiB sparse settings.json."""
    argv = ["serve", "--target", str(tmp_path / "missing.gguf")]
    p = _write_settings({"port": 9123})
    rc, normal_kib, err = _peak_rss_kib(argv, _home)
    assert rc == 2 and "no such file" in err
    os.truncate(p, 512 * MIB)  # sparse: no disk used
    rc, big_kib, err = _peak_rss_kib(argv, _home)
    assert rc == 2 and "no such file" in err and "Traceback" not in err
    assert abs(big_kib - normal_kib) < 10 * 1000, (normal_kib, big_kib)  # within 10 MB
    assert p.stat().st_size == 512 * MIB and sorted(x.name for x in p.parent.iterdir()) == ["settings.json"]


def test_a_too_large_settings_file_is_a_clear_error_and_never_repaired(_home: Path) -> None:
    p = _write_settings({})
    os.truncate(p, S.MAX_SETTINGS_BYTES + 1)
    with pytest.raises(storage.FileTooLargeError) as info:
        S.load_settings()
    assert str(info.value) == (f"{p}: 1.0 MiB, larger than the 1.0 MiB a settings file may be; it is left as it is, "
                               "unread (move it away or make it smaller)")
    loaded = S.load_settings_keeping_valid()  # the app's start: repairs a bad key, never a too-large file
    assert loaded.settings == S.Settings() and loaded.kept_aside is None
    assert loaded.message() == f"{p}: {info.value.reason} (using the default settings)"
    assert p.stat().st_size == S.MAX_SETTINGS_BYTES + 1 and [x.name for x in p.parent.iterdir()] == ["settings.json"]
    os.truncate(p, 0)
    p.write_text(json.dumps({"port": 9123}))  # at the limit or below it is read as before
    assert S.load_settings().port == 9123


def test_a_too_large_profile_is_a_profile_error_naming_it(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path / "profiles")
    target = tmp_path / "t.gguf"
    path = store.path_for(target)
    path.parent.mkdir(parents=True)
    with path.open("wb") as fh:
        fh.truncate(MAX_PROFILE_BYTES + 1)
    with pytest.raises(ProfileError, match="larger than the 32.0 MiB a profile may be"):
        store.load(target)
    assert path.stat().st_size == MAX_PROFILE_BYTES + 1 and not list(path.parent.glob("*.corrupt-*"))
    _, bad = store.all_with_problems()
    assert len(bad) == 1 and "32.0 MiB a profile" in str(bad[0])


def test_a_too_large_scan_cache_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tuner.catalog.scan import MAX_CACHE_BYTES, _cache_path, scan_folder

    write_llama_gguf(tmp_path / "m" / "t.gguf", n_embd=32, n_layers=1)
    cache = _cache_path()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with cache.open("wb") as fh:
        fh.truncate(MAX_CACHE_BYTES + 1)
    with caplog.at_level("WARNING", logger="tuner.catalog.scan"):
        rows = scan_folder(tmp_path / "m")
    assert [r.kind for r in rows] == ["llm"]
    assert "64.0 MiB the scan cache may be" in caplog.text
    assert json.loads(cache.read_text())["entries"]  # our own cache, replaced by the scan's


# ------------------------------------------------------------------ copies and temp files pruned


def test_40_repair_cycles_leave_at_most_5_copies(_home: Path) -> None:
    kept = []
    for i in range(40):
        p = _write_settings({"port": 9123, "tune_budget_s": f"bad {i}"})  # a bad key: copied aside, repaired
        loaded = S.load_settings_keeping_valid()
        assert loaded.kept_aside is not None and loaded.settings.port == 9123
        kept.append(loaded.kept_aside)
    # each repair kept its own copy (none overwrote another within the same second), the newest five remain
    copies = set(p.parent.glob("settings.json.invalid-*"))
    assert len(set(kept)) == 40 and copies == set(kept[-storage.KEEP_COPIES:])
    assert sorted(json.loads(c.read_text())["tune_budget_s"] for c in copies) == [f"bad {i}" for i in range(35, 40)]
    for i in range(40):  # not JSON at all: renamed aside as .corrupt-<time>
        p.write_text("{not json " + str(i))
        assert S.load_settings_keeping_valid().kept_aside is not None
    corrupt = list(p.parent.glob("settings.json.corrupt-*"))
    assert sorted(c.read_text() for c in corrupt) == [f"{{not json {i}" for i in range(35, 40)]


def test_temp_files_of_interrupted_writes_are_pruned_to_5(_home: Path) -> None:
    """A write killed between its temp file and the rename leaves ``.settings.json.XXXX.tmp`` (the issue's 40
    kill -9 trials left 27); the next write keeps the newest five."""
    p = S.save_settings(S.Settings())
    left = []
    for i in range(40):
        fd, name = tempfile.mkstemp(prefix=".settings.json.", suffix=".tmp", dir=p.parent)
        os.write(fd, b"{")
        os.close(fd)
        os.utime(name, ns=(time.time_ns() - (40 - i) * 10**9,) * 2)  # one a second, the last the newest
        left.append(Path(name))
    S.save_settings(S.Settings(port=9124))
    remaining = sorted(p.parent.glob(".settings.json.*.tmp"))
    assert remaining == sorted(left[-storage.KEEP_COPIES:])
    assert S.load_settings().port == 9124
