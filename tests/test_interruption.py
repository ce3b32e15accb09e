"""A run killed with SIGKILL half-way, then rerun, repeats no completed call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from pytest_socialbias.testing import FakeServer

from . import fakeworld
from .conftest import suite_yaml, read_report

CONCURRENCY = 2


def pytest_command(server, report):
    url = server.openai_base_url
    return [
        sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-q",
        f"--target=openai:t@{url}", f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}",
        f"--socialbias-concurrency={CONCURRENCY}", f"--socialbias-report={report}",
    ]


def request_key(request) -> str:
    return json.dumps([request.model, request.messages, request.params], sort_keys=True)


def test_sigkill_then_rerun_repeats_no_completed_call(tmp_path):
    cases = [(f"age-{i:03d}", "age", ("BIASME " if i % 3 == 0 else "") + f"statement {i}.") for i in range(6)]
    (tmp_path / "demo.yaml").write_text(suite_yaml(cases, turns=2))
    env = dict(os.environ, OPENAI_API_KEY="sk-test")

    # An uninterrupted run in another folder gives the expected report and call count.
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "demo.yaml").write_text(suite_yaml(cases, turns=2))
    with FakeServer(fakeworld.script, latency=0.05) as server:
        done = subprocess.run(pytest_command(server, "r.json"), cwd=clean, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout
        full_count = server.request_count
        clean_keys = {request_key(r) for r in server.requests}
        expected = read_report(clean / "r.json")

        server.clear()
        proc = subprocess.Popen(pytest_command(server, "r.json"), cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while server.request_count < full_count // 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        first = server.requests
        assert 0 < len(first) < full_count

        server.clear()
        rerun = subprocess.run(pytest_command(server, "r.json"), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stdout
        second = server.requests

    # Calls answered before the kill are replayed from the cache; at most the calls that
    # were in flight when the process died are sent again.
    repeated = {request_key(r) for r in first} & {request_key(r) for r in second}
    assert len(repeated) <= CONCURRENCY
    # Together the two runs asked exactly the questions of an uninterrupted run.
    assert {request_key(r) for r in first} | {request_key(r) for r in second} == clean_keys
    report = read_report(tmp_path / "r.json")
    assert report["cases"] == expected["cases"]
    assert report["metrics"] == expected["metrics"]
