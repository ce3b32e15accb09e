"""Four xdist workers write one cache at once, many of their requests identical, each sent once.

BIASME and REFUSEME seeds make the user simulator write the same message for every such
case, so the target and judge requests of those cases are identical across batches, and
the batches run on different workers at the same moment. The cache must end with exactly
one row per distinct request, no "database is locked" anywhere, and a replay-only rerun
must send nothing and write the same report.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest

from pytest_socialbias.cache import CACHE_FILE
from pytest_socialbias.cachecheck import verify_cache
from pytest_socialbias.testing import FakeServer

from ..support import fakeworld
from ..support.helpers import read_report, suite_yaml

WORKERS = 4
# Every third seed is plain (its own dialogue); the others share their target and judge
# requests with every seed of the same marker.
CASES = [
    (f"{('age', 'gender', 'race')[i % 3]}-{i:03d}", ("age", "gender", "race")[i % 3],
     ("BIASME " if i % 3 == 0 else "REFUSEME " if i % 3 == 1 else "") + f"statement {i}.")
    for i in range(48)
]
BATCH_SIZE = 6  # 8 batches: two per worker


def request_key(req) -> str:
    return json.dumps([req.model, req.messages, req.params], sort_keys=True)


def run_pytest(server, path, *extra) -> subprocess.CompletedProcess:
    url = server.openai_base_url
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", "demo.yaml", "-p", "no:cacheprovider", "-v",
            f"--basetemp={path}/bt", "-n", str(WORKERS), f"--target=openai:t@{url}",
            f"--judge=openai:j@{url}", f"--user-model=openai:u@{url}", "--socialbias-report=r.json",
            *extra,
        ],
        cwd=path, env=dict(os.environ, OPENAI_API_KEY="sk-test"), capture_output=True, text=True,
    )


@pytest.fixture
def server():
    # Latency keeps the identical requests of different workers in flight together.
    with FakeServer(fakeworld.script, latency=0.05) as srv:
        yield srv
        assert srv.script_errors == []


def test_workers_share_one_cache_then_replay(server, tmp_path):
    (tmp_path / "demo.yaml").write_text(suite_yaml(CASES, turns=2, batch_size=BATCH_SIZE))

    recorded = run_pytest(server, tmp_path)
    output = recorded.stdout + recorded.stderr
    assert recorded.returncode == 0, output[-3000:]
    assert "database is locked" not in output
    # Every worker ran cases (xdist -v tags each result line with its worker).
    assert set(re.findall(r"\[(gw\d+)\]", output)) == {f"gw{i}" for i in range(WORKERS)}
    # Seeds that share their requests run on every worker, so workers want the same keys
    # at the same moment: the first to claim one asks it, the others take its answer
    # (cache.py, claims), so each is sent once and one row stays.
    sent = Counter(request_key(r) for r in server.requests)
    assert max(sent.values()) == 1, [k for k, n in sent.items() if n > 1][:3]

    with sqlite3.connect(tmp_path / ".socialbias" / CACHE_FILE) as db:
        rows = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        duplicated = db.execute("SELECT key, COUNT(*) FROM calls GROUP BY key HAVING COUNT(*) > 1").fetchall()
    db.close()
    checks = len(server.endpoint_checks)  # one per role, answered by the server itself
    assert checks == 3
    assert rows == len(sent) + checks  # no lost entry ...
    assert duplicated == []  # ... and none twice
    assert verify_cache(tmp_path / ".socialbias") == (len(sent) + checks, [])
    report = (tmp_path / "r.json").read_bytes()
    assert len(read_report(tmp_path / "r.json")["cases"]) == len(CASES)

    server.clear()
    replayed = run_pytest(server, tmp_path, "--socialbias-record=none")
    output = replayed.stdout + replayed.stderr
    assert replayed.returncode == 0, output[-3000:]
    assert "database is locked" not in output
    assert server.request_count == 0
    assert (tmp_path / "r.json").read_bytes() == report
