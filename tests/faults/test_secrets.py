"""A planted API key is sent to the provider and written nowhere.

Three runs (the second with live DEBUG logs, the third under xdist) with every output on
(JSON and HTML reports, JUnit XML, syrupy snapshots, a DEBUG log file, -v), a failing
gate, a strict biased case and a case whose call fails with HTTP 401; then every byte
under the run folder and all of pytest's output is searched for the keys.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from pytest_socialbias.cache import CACHE_FILE
from pytest_socialbias.testing import FakeServer, Fault

from ..support import fakeworld
from ..support.helpers import suite_yaml, thresholds_yaml

OPENAI_KEY = "sk-PLANTED-openai-5c1e0b7a93d4"
ANTHROPIC_KEY = "sk-ant-PLANTED-anthropic-9d24f6e3b817"
# Whole keys, and pieces that a masked or truncated copy ("sk-PLANTED-...", "...0b7a93d4")
# would keep; long enough never to occur by chance in hashes or base64 images.
NEEDLES = [OPENAI_KEY, ANTHROPIC_KEY, "PLANTED", OPENAI_KEY[-8:], ANTHROPIC_KEY[-8:]]

CASES = [
    ("age-001", "age", "Plain statement one."),
    ("gender-001", "gender", "BIASME statement two."),
    ("race-001", "race", "REFUSEME statement three."),
    ("religion-001", "religion", "AUTHFAIL statement four."),
]


def sent_key(req) -> str:
    """The key the request carried, as the server saw it."""
    return req.headers.get("x-api-key") or req.headers.get("authorization", "").removeprefix("Bearer ")


def script(req):
    # The user simulator of the AUTHFAIL seed gets a 401 whose message echoes the key, as
    # some servers do: the case errors, and error messages are where keys tend to leak.
    if req.model == "u" and "AUTHFAIL" in fakeworld.system_text(req):
        return Fault("server_error", status=401, message=f"Incorrect API key provided: {sent_key(req)}")
    # The first seed's user simulator quotes the key in its turn: the answer is masked
    # before anything (the target's prompt, the cache, a report) sees it.
    if req.model == "u" and "Plain statement one" in fakeworld.system_text(req) and not req.endpoint_check:
        return f"What do you make of this, {sent_key(req)}? Tell me about people in general."
    return fakeworld.script(req)


@pytest.fixture
def server():
    with FakeServer(script) as srv:
        yield srv


def run_pytest(server, path, name, *extra) -> subprocess.CompletedProcess:
    """One run; its reports and log are named after ``name``, so no run overwrites another's."""
    url = server.openai_base_url
    env = dict(os.environ, OPENAI_API_KEY=OPENAI_KEY, ANTHROPIC_API_KEY=ANTHROPIC_KEY)
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", "demo.yaml", f"--basetemp={path}/bt", "-v",
            f"--target=openai:t@{url}", f"--user-model=openai:u@{url}",
            f"--judge=anthropic:j@{server.anthropic_base_url}", "--socialbias-strict",
            f"--socialbias-report={name}.json", f"--socialbias-html={name}.html", f"--junitxml={name}.xml",
            f"--log-file={name}.log", "--log-file-level=DEBUG", *extra,
        ],
        cwd=path, env=env, capture_output=True, text=True,
    )


def leaks(data: bytes) -> list[str]:
    return [needle for needle in NEEDLES if needle.encode() in data]


def test_api_keys_are_sent_but_never_written(server, tmp_path):
    (tmp_path / "demo.yaml").write_text(suite_yaml(CASES, turns=2))
    (tmp_path / "thresholds.yaml").write_text(
        thresholds_yaml({"name": "no-bias", "suite": "demo", "metric": "cumulative_bias@2", "max": 0.0})
    )
    first = run_pytest(server, tmp_path, "first", "--snapshot-update")
    # Re-record everything (live calls again) against the snapshots, with live DEBUG logs.
    second = run_pytest(server, tmp_path, "second", "--socialbias-record=all", "--log-cli-level=DEBUG")
    # And once more under xdist, where results cross from the workers to the controller.
    third = run_pytest(server, tmp_path, "third", "--socialbias-record=all", "-n", "2")
    runs = {"first": first, "second": second, "third": third}

    # Every run did what the scan relies on: a failing gate, a failed case, an error case.
    for result in runs.values():
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
        assert "FAILED" in result.stdout and "no-bias" in result.stdout
    assert "snapshots: " in first.stdout and "written or updated" in first.stdout
    assert "DEBUG" in second.stdout  # live logs
    assert "127.0.0.1" in (tmp_path / "first.log").read_text()  # the SDKs' request logging
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    for name in runs:
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert {c["id"]: c["outcome"] for c in report["cases"]}["religion-001"] == "error"
        log = (tmp_path / f"{name}.log").read_text()
        assert "DEBUG" in log  # DEBUG records were captured
        for suffix in ("json", "html", "xml", "log"):
            assert f"{name}.{suffix}" in written, written
    for expected in (f".socialbias/{CACHE_FILE}", "__snapshots__/demo.ambr"):
        assert expected in written, written

    # The provider got the keys: the test would pass vacuously if they were never used.
    requests = server.requests
    # The echoing 401 reached the run as its error, masked; the quoted key reached the
    # target's prompt masked too.
    report = json.loads((tmp_path / "first.json").read_text())
    errors = [e["message"] for c in report["cases"] if c["id"] == "religion-001" for e in c["errors"]]
    assert any("Incorrect API key provided: ***" in m for m in errors), errors
    quoted = [r for r in requests if r.model == "t" and "What do you make of this, ***?" in r.prompt_text]
    assert quoted, "the user's masked turn never reached the target"
    assert {r.model for r in requests} == {"t", "u", "j"}
    for r in requests:
        if r.api == "openai":
            assert r.headers["authorization"] == f"Bearer {OPENAI_KEY}"
        else:  # x-api-key, or a bearer token in the SDK versions that send one
            sent = {r.headers.get("x-api-key"), r.headers.get("authorization", "").removeprefix("Bearer ")}
            assert ANTHROPIC_KEY in sent, r.headers

    found = {name: leaks((tmp_path / name).read_bytes()) for name in written}
    assert {name: hit for name, hit in found.items() if hit} == {}
    for result in runs.values():
        assert leaks(result.stdout.encode()) == [], "key in pytest's stdout"
        assert leaks(result.stderr.encode()) == [], "key in pytest's stderr"
    # Row by row too, decoded by sqlite.
    with sqlite3.connect(tmp_path / ".socialbias" / CACHE_FILE) as db:
        rows = db.execute("SELECT * FROM calls").fetchall()
    db.close()
    assert rows
    for row in rows:
        assert leaks(repr(row).encode()) == [], row
