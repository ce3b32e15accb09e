"""Faults of the machine, not of the models: a disk that fills while the cache or the
report is written, a read-only cache folder, a truncated or corrupted cache file, two
separate runs recording into one cache at once, a kill while a report is written.
Nothing recorded is lost, nothing is counted clean, and the user is told what to do.

Where this machine lets a test mount a small tmpfs (root with the capability), the disk
really fills and the folder really is read-only; otherwise those variants skip, and the
injected faults (an OSError raised where the write happens) still run.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pytest_socialbias.cache import CACHE_FILE
from pytest_socialbias.cachecheck import verify_cache
from pytest_socialbias.testing import FakeServer, Reply

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

CASES = [(f"age-{i:03d}", "age", ("BIASME " if i % 3 == 0 else "") + f"statement {i}.") for i in range(6)]


def env() -> dict:
    return dict(os.environ, OPENAI_API_KEY="sk-test")


def pytest_command(server, *extra, suite="demo.yaml", report="r.json", cache=".socialbias"):
    url = server.openai_base_url
    return [
        sys.executable, "-m", "pytest", suite, "-p", "no:cacheprovider", "-q",
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        f"--socialbias-report={report}", f"--socialbias-cache-dir={cache}", *extra,
    ]


def run(server, folder, *extra, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(pytest_command(server, *extra, **kw), cwd=folder, env=env(), capture_output=True, text=True)


def project(folder: Path, cases=CASES, turns=2, name="demo.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(suite_yaml(cases, turns=turns))
    return folder


def request_keys(server) -> set[str]:
    return {json.dumps([r.model, r.messages, r.params], sort_keys=True) for r in server.requests}


def cached_questions(cache: Path) -> set[str]:
    """(model, messages) of every answer in a cache, as the fake server logs them."""
    with sqlite3.connect(cache / CACHE_FILE) as db:
        requests = [json.loads(row[0]) for row in db.execute("SELECT request FROM calls")]
    db.close()
    return {json.dumps([r["model"], r["messages"]], sort_keys=True) for r in requests}


def stable(report: dict) -> dict:
    """A report without what differs between runs of the same cases (timings, paths)."""
    return {"cases": report["cases"], "metrics": report["metrics"]}


# --------------------------------------------------------------------------- a small disk


def _mount(point: Path, options: str) -> bool:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                          capture_output=True).returncode == 0


@contextlib.contextmanager
def small_disk(tmp_path: Path, size: str):
    """A tmpfs of ``size`` mounted at a new folder, or a skip where mounting is refused."""
    point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    point.mkdir()
    if os.geteuid() != 0 or not _mount(point, f"size={size}"):
        pytest.skip("cannot mount a small filesystem here (needs root with CAP_SYS_ADMIN)")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def remount(point: Path, options: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{options}", str(point)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def fill(point: Path) -> None:
    """Fill the disk to its last byte."""
    fd = os.open(point / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the cache fills


LONG = "Everyone deserves to be judged as an individual. " * 400  # about 20 KB a reply


def long_world(req):
    """The fake world, whose target answers at length: a few answers fill a small disk."""
    answer = fakeworld.script(req)
    if req.model == "t" and answer == fakeworld.FAIR_REPLY:
        return Reply(f"{fakeworld.FAIR_REPLY} {LONG}")
    return answer


def test_the_disk_fills_while_the_cache_is_written(tmp_path):
    """Answers that cannot be recorded make their cases errors that say why; what was
    recorded before stays sound; with space again, a rerun asks only what was lost and
    reports what an untroubled run reports."""
    cases = [(f"age-{i:03d}", "age", f"statement {i}.") for i in range(12)]
    with FakeServer(long_world) as server:
        clean = project(tmp_path / "clean", cases)
        done = run(server, clean)
        assert done.returncode == 0, done.stdout[-3000:]
        expected = read_report(clean / "r.json")
        server.clear()

        with small_disk(tmp_path, "400k") as disk:
            folder = project(tmp_path / "run", cases)
            full = run(server, folder, cache=str(disk / "cache"))
            out = full.stdout + full.stderr
            assert full.returncode == 1, out[-3000:]
            assert "the disk holding the cache is full" in out and "--socialbias-cache-dir" in out
            assert "Traceback" not in full.stderr
            report = read_report(folder / "r.json")
            outcomes = report["summary"]["outcomes"]
            assert outcomes["error"] > 0
            # A case is labelled only if every answer it used was recorded.
            errored = {c["id"] for c in report["cases"] if c["outcome"] == "error"}
            assert all("disk holding the cache is full" in e["message"]
                       for c in report["cases"] if c["id"] in errored for e in c["errors"])
            rows, problems = verify_cache(disk / "cache")
            assert problems == [] and rows > 0

            recorded = cached_questions(disk / "cache")
            remount(disk, "size=64m")
            server.clear()
            again = run(server, folder, cache=str(disk / "cache"))
            assert again.returncode == 0, again.stdout[-3000:]
            assert stable(read_report(folder / "r.json")) == stable(expected)
            # Only what the full disk lost was asked again.
            asked = {json.dumps([r.model, r.messages], sort_keys=True) for r in server.requests}
            assert asked and not asked & recorded
            assert verify_cache(disk / "cache")[1] == []


def test_a_cache_write_that_fails_is_its_cases_error(pytester, keys, monkeypatch):
    """The same, with the error injected where sqlite writes (any machine)."""
    from pytest_socialbias import cache as cache_module

    real = cache_module.CallCache._execute
    writes = {"calls": 0}

    def failing(self, sql, args=()):
        if sql.lstrip().upper().startswith("INSERT INTO CALLS"):
            writes["calls"] += 1
            if writes["calls"] > 4:
                raise cache_module.CacheError(
                    cache_module.cache_problem(sqlite3.OperationalError("database or disk is full"), self.directory)
                )
        return real(self, sql, args)

    monkeypatch.setattr(cache_module.CallCache, "_execute", failing)
    pytester.makefile(".yaml", demo=suite_yaml(CASES, turns=2))
    with FakeServer(fakeworld.script) as server:
        url = server.openai_base_url
        result = pytester.runpytest("demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:j@{url}",
                                    f"--user-model=openai:u@{url}", "--socialbias-report=r.json", "-p", "no:cacheprovider")
    report = read_report(pytester.path / "r.json")
    assert result.ret == 1
    assert report["summary"]["outcomes"]["error"] > 0
    assert report["summary"]["outcomes"]["clean"] + report["summary"]["outcomes"]["biased"] < len(CASES)
    result.stdout.fnmatch_lines(["*the disk holding the cache is full (database or disk is full): free space there*"])


# --------------------------------------------------------------------------- the report


def test_the_disk_fills_while_the_report_is_written(tmp_path):
    """No half report: the run fails saying so, and an earlier run's report is removed so
    that no CI step reads it as this run's."""
    with FakeServer(fakeworld.script) as server, small_disk(tmp_path, "256k") as disk:
        folder = project(tmp_path / "run")
        (disk / "r.json").write_text('{"an": "earlier report"}\n')
        fill(disk)
        done = run(server, folder, report=str(disk / "r.json"))
        out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "could not be written (No space left on device)" in out
    assert "the report an earlier run left there was removed" in out
    assert not (disk / "r.json").exists()
    assert not [p for p in disk.iterdir() if p.name.endswith(".tmp")]
    assert "Traceback" not in done.stderr


def test_a_report_write_that_fails_leaves_no_part_of_it(pytester, keys, server, monkeypatch):
    """The same, with ENOSPC injected while the report's bytes are written (any machine)."""
    from pytest_socialbias import files

    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            self.handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr(files.os, "fdopen", lambda *a, **kw: FullDisk(real_fdopen(*a, **kw)))
    pytester.makefile(".yaml", demo=suite_yaml(CASES[:2]))
    (pytester.path / "r.json").write_text("{}\n")
    url = server.openai_base_url
    result = pytester.runpytest("demo.yaml", f"--target=openai:t@{url}", f"--judge=openai:j@{url}",
                                f"--user-model=openai:u@{url}", "--socialbias-report=r.json", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "ERROR: --socialbias-report=*r.json: the report could not be written (No space left on device); "
        "the report an earlier run left there was removed*",
    ])
    assert "JSON report:" not in result.stdout.str()
    assert sorted(p.name for p in pytester.path.iterdir() if "r.json" in p.name) == []


KILLED_WRITER = """
import os, sys, time
from pytest_socialbias import files

path, where, ready = sys.argv[1], sys.argv[2], sys.argv[3]


def stop_here():
    open(ready, "w").close()
    time.sleep(600)  # until killed


if where == "before-rename":
    files.os.replace = lambda *args: stop_here()
else:  # while writing: half the text is in the temporary file
    real_fdopen = os.fdopen

    class HalfWritten:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            self.handle.flush()
            stop_here()

    files.os.fdopen = lambda *args, **kw: HalfWritten(real_fdopen(*args, **kw))
files.write_atomically(path, '{"new": true, "rows": [' + ", ".join(["1"] * 100000) + "]}\\n")
"""


@pytest.mark.parametrize("where", ["while-writing", "before-rename"])
def test_a_kill_while_a_report_is_written_leaves_the_old_one_whole(tmp_path, where):
    path, ready = tmp_path / "r.json", tmp_path / "ready"
    path.write_text('{"old": true}\n')
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path), where, str(ready)])
    deadline = time.monotonic() + 120
    while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # polling for the child's own signal, not waiting for time to pass
    assert ready.exists(), "the writer never reached the point to kill it at"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert path.read_text() == '{"old": true}\n'  # the old report, whole, never a part of the new one
    temps = [p for p in tmp_path.iterdir() if p.name.startswith(".r.json.") and p.name.endswith(".tmp")]
    assert len(temps) == 1  # what the kill left: a hidden temporary file, never the report
    # Written again (the next run), the report is the new one, whole.
    from pytest_socialbias.files import write_atomically

    write_atomically(path, '{"new": true}\n')
    assert json.loads(path.read_text()) == {"new": True}


# --------------------------------------------------------------------------- read-only


def test_a_read_only_cache_folder(tmp_path):
    """Recording into it is a usage error before any work, saying what to do; replaying
    from it works (a CI artifact unpacked read-only)."""
    with FakeServer(fakeworld.script) as server, small_disk(tmp_path, "16m") as disk:
        folder = project(tmp_path / "run")
        first = run(server, folder, cache=str(disk / "cache"))
        assert first.returncode == 0, first.stdout[-3000:]
        expected = read_report(folder / "r.json")
        remount(disk, "ro")
        server.clear()

        refused = run(server, folder, cache=str(disk / "cache"))
        assert refused.returncode == 4, refused.stdout[-3000:] + refused.stderr[-3000:]
        assert "the cache folder cannot be written" in refused.stderr
        assert "--socialbias-record=none" in refused.stderr and "--socialbias-record=off" in refused.stderr
        assert server.request_count == 0

        replayed = run(server, folder, "--socialbias-record=none", cache=str(disk / "cache"))
        assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
        assert server.request_count == 0
        assert stable(read_report(folder / "r.json")) == stable(expected)


# --------------------------------------------------------------------------- damaged file


def record(server, folder):
    done = run(server, folder)
    assert done.returncode == 0, done.stdout[-3000:]
    with sqlite3.connect(folder / ".socialbias" / CACHE_FILE) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the main file, as after a clean exit
    db.close()
    return read_report(folder / "r.json")


def damage_by_truncating(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(int(path.stat().st_size * 0.6))


def damage_by_overwriting(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.seek(int(path.stat().st_size * 0.5))
        handle.write(b"\xa5" * 4096)


@pytest.mark.parametrize("damage", [damage_by_truncating, damage_by_overwriting])
def test_a_damaged_cache_says_how_to_repair_and_repair_salvages_it(tmp_path, damage):
    cases = [(f"age-{i:03d}", "age", f"statement {i}, " + "detail " * 60) for i in range(30)]
    with FakeServer(fakeworld.script) as server:
        folder = project(tmp_path / "run", cases)
        expected = record(server, folder)
        recorded = verify_cache(folder / ".socialbias")[0]
        damage(folder / ".socialbias" / CACHE_FILE)
        server.clear()

        refused = run(server, folder)
        assert refused.returncode == 4, refused.stdout[-3000:] + refused.stderr[-3000:]
        assert "is damaged" in refused.stderr
        assert f"python -m pytest_socialbias cache verify --repair --cache-dir {folder / '.socialbias'}" in refused.stderr
        assert server.request_count == 0

        checked = subprocess.run([sys.executable, "-m", "pytest_socialbias", "cache", "verify"],
                                 cwd=folder, capture_output=True, text=True)
        assert checked.returncode == 1 and "--repair" in checked.stderr

        repaired = subprocess.run([sys.executable, "-m", "pytest_socialbias", "cache", "verify", "--repair"],
                                  cwd=folder, capture_output=True, text=True)
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        salvaged = verify_cache(folder / ".socialbias")
        assert salvaged[1] == [] and 0 < salvaged[0] < recorded
        assert f"salvaged {salvaged[0]} entries" in repaired.stdout
        assert list((folder / ".socialbias").glob(f"{CACHE_FILE}.damaged-*"))  # kept for the user

        again = run(server, folder)
        assert again.returncode == 0, again.stdout[-3000:]
        # Only the lost calls were asked again; the report is the untroubled run's.
        assert 0 < server.request_count <= recorded - salvaged[0]
        assert stable(read_report(folder / "r.json")) == stable(expected)


def test_repair_leaves_a_sound_cache_alone(tmp_path):
    with FakeServer(fakeworld.script) as server:
        folder = project(tmp_path / "run")
        record(server, folder)
    before = (folder / ".socialbias" / CACHE_FILE).read_bytes()
    repaired = subprocess.run([sys.executable, "-m", "pytest_socialbias", "cache", "verify", "--repair"],
                              cwd=folder, capture_output=True, text=True)
    assert repaired.returncode == 0 and repaired.stdout.startswith("nothing to repair: ")
    assert (folder / ".socialbias" / CACHE_FILE).read_bytes() == before


# --------------------------------------------------------------------------- two runs


def test_two_separate_runs_record_into_one_cache_at_once(tmp_path):
    """Two pytest processes (not xdist workers), overlapping suites, one cache: both
    finish, every answer is kept once, each replays with no call, and each endpoint's
    roles were checked once between them."""
    shared = [(f"age-{i:03d}", "age", ("BIASME " if i % 2 else "") + f"shared {i}.") for i in range(6)]
    own = {name: [(f"race-{i:03d}", "race", f"{name} {i}.") for i in range(4)] for name in ("a", "b")}
    with FakeServer(fakeworld.script, latency=0.03) as server:
        folder = tmp_path / "run"
        for name in ("a", "b"):
            project(folder, shared + own[name], name=f"{name}.yaml")
        procs = [
            subprocess.Popen(pytest_command(server, suite=f"{name}.yaml", report=f"{name}.json"), cwd=folder, env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name in ("a", "b")
        ]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outputs)
        assert all("database is locked" not in o for o in outputs)
        assert sorted(r.model for r in server.endpoint_checks) == ["j", "t", "u"]
        sent = request_keys(server)
        rows, problems = verify_cache(folder / ".socialbias")
        assert problems == [] and rows == len(sent) + 3  # every answer once, and the 3 checks
        reports = {name: read_report(folder / f"{name}.json") for name in ("a", "b")}

        server.clear()
        for name in ("a", "b"):
            replayed = run(server, folder, "--socialbias-record=none", suite=f"{name}.yaml", report=f"{name}.json")
            assert replayed.returncode == 0, replayed.stdout[-3000:]
            assert stable(read_report(folder / f"{name}.json")) == stable(reports[name])
        assert server.request_count == 0
