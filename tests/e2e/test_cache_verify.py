"""`python -m pytest_socialbias cache verify`: checks a record/replay cache, changes nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from pytest_socialbias.__main__ import main
from pytest_socialbias.cache import CACHE_FILE, CallCache, cache_key
from pytest_socialbias.cachecheck import verify_cache


def request(n: int) -> dict:
    return {
        "provider": "openai",
        "model": "j",
        "base_url": "http://127.0.0.1:9/v1",
        "params": {"max_tokens": 20, "temperature": 0.0},
        "messages": [{"role": "user", "content": f"question {n}: " + "padding " * 40}],
        "template": "judge_bias@1",
        "sample": 0,
        "top_logprobs": None,
    }


def response(n: int) -> dict:
    return {"text": f"answer {n}", "finish_reason": "stop", "prompt_tokens": 3, "completion_tokens": 1,
            "logprobs": None, "model": "j"}


def make_cache(directory, rows: int = 3) -> list[str]:
    """A cache written the way runs write it; returns its keys in order."""
    cache = CallCache(directory, "new")
    keys = []
    for n in range(rows):
        keys.append(cache_key(request(n)))
        cache.put(keys[-1], "judge", request(n), response(n))
    cache.close()
    return keys


def tamper(directory, sql: str, *args) -> None:
    with sqlite3.connect(directory / CACHE_FILE) as db:
        db.execute(sql, args)
    db.close()


def verify(capsys, *argv):
    status = main(["cache", "verify", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / ".socialbias"


def test_sound_cache_is_one_line_and_exit_0(cache_dir, capsys):
    make_cache(cache_dir, rows=3)
    assert verify(capsys, f"--cache-dir={cache_dir}") == (0, ["3 entries OK"], [])


def test_default_cache_dir_is_dot_socialbias(tmp_path, monkeypatch, capsys):
    make_cache(tmp_path / ".socialbias", rows=2)
    monkeypatch.chdir(tmp_path)
    assert verify(capsys) == (0, ["2 entries OK"], [])


def test_empty_cache_is_ok(cache_dir, capsys):
    make_cache(cache_dir, rows=0)
    assert verify(capsys, f"--cache-dir={cache_dir}") == (0, ["0 entries OK"], [])


def test_rows_still_in_the_wal_of_an_open_writer_are_checked(cache_dir, capsys):
    # A run killed mid-way leaves its rows in the -wal file, not yet in the main file.
    cache = CallCache(cache_dir, "new")
    cache.put(cache_key(request(0)), "judge", request(0), response(0))
    tamper(cache_dir, "UPDATE calls SET response = ?", "{oops")
    try:
        status, out, _ = verify(capsys, f"--cache-dir={cache_dir}")
    finally:
        cache.close()
    assert status == 1
    assert out == [f"key {cache_key(request(0))}: response is not valid JSON "
                   "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"]


def test_bad_json_row_is_reported_with_its_key(cache_dir, capsys):
    keys = make_cache(cache_dir, rows=3)
    tamper(cache_dir, "UPDATE calls SET request = ? WHERE key = ?", '{"provider": "openai",', keys[1])
    status, out, err = verify(capsys, f"--cache-dir={cache_dir}")
    assert status == 1
    assert len(out) == 1 and out[0].startswith(f"key {keys[1]}: request is not valid JSON"), out
    assert err == [
        f"1 problem(s) in {cache_dir}; `python -m pytest_socialbias cache verify --repair --cache-dir {cache_dir}` "
        "salvages what is readable into a new file"
    ]
    # --repair keeps the two sound rows, drops the unsound one, and keeps the old file.
    status, out, _ = verify(capsys, f"--cache-dir={cache_dir}", "--repair")
    assert status == 0
    assert out[0].startswith("salvaged 2 entries into a new ") and "1 read but were unsound" in out[0]
    assert verify_cache(cache_dir) == (2, [])
    assert len([p for p in cache_dir.glob("calls.sqlite3.damaged-*") if not p.name.endswith("-wal")]) == 1


def test_key_mismatch_is_reported_with_both_hashes(cache_dir, capsys):
    keys = make_cache(cache_dir, rows=3)
    # The request was edited after it was stored: a lookup by the new request misses.
    edited = request(2)
    edited["messages"][0]["content"] = "edited"
    tamper(cache_dir, "UPDATE calls SET request = ? WHERE key = ?", json.dumps(edited), keys[2])
    status, out, _ = verify(capsys, f"--cache-dir={cache_dir}")
    assert status == 1
    assert out == [f"key {keys[2]}: key is not the sha256 of the stored request (that is {cache_key(edited)})"]


@pytest.mark.parametrize(
    "stored, problem",
    [
        ("not json", "response is not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        ('["a list"]', "response is not a JSON object"),
        ('{"text": "No"}', "response lacks finish_reason, prompt_tokens, completion_tokens, logprobs, model"),
        (json.dumps({**response(0), "text": None}), "response text is not a string"),
    ],
)
def test_bad_response_is_reported(cache_dir, capsys, stored, problem):
    keys = make_cache(cache_dir, rows=2)
    tamper(cache_dir, "UPDATE calls SET response = ? WHERE key = ?", stored, keys[0])
    assert verify(capsys, f"--cache-dir={cache_dir}")[:2] == (1, [f"key {keys[0]}: {problem}"])


def test_request_that_is_not_an_object_is_reported(cache_dir, capsys):
    keys = make_cache(cache_dir, rows=1)
    tamper(cache_dir, "UPDATE calls SET request = '[1, 2]'")
    assert verify(capsys, f"--cache-dir={cache_dir}")[:2] == (1, [f"key {keys[0]}: request is not a JSON object"])


def test_every_bad_row_is_listed(cache_dir, capsys):
    keys = make_cache(cache_dir, rows=4)
    tamper(cache_dir, "UPDATE calls SET response = 'x' WHERE key IN (?, ?)", keys[0], keys[3])
    status, out, _ = verify(capsys, f"--cache-dir={cache_dir}")
    assert status == 1
    assert sorted(line.split(":")[0] for line in out) == sorted([f"key {keys[0]}", f"key {keys[3]}"])


def test_missing_dir_is_a_usage_error_in_one_line(tmp_path, capsys):
    status, out, err = verify(capsys, f"--cache-dir={tmp_path / 'nope'}")
    assert (status, out) == (2, [])
    assert err == [
        f"python -m pytest_socialbias cache verify: error: --cache-dir={tmp_path / 'nope'}: no such folder; "
        "pass the folder of the cache (default .socialbias)"
    ]


def test_dir_without_cache_file_is_a_usage_error(tmp_path, capsys):
    status, out, err = verify(capsys, f"--cache-dir={tmp_path}")
    assert (status, out, len(err)) == (2, [], 1)
    assert f"no {CACHE_FILE} in it" in err[0]


def test_missing_action_is_a_usage_error(capsys):
    assert main(["cache"]) == 2
    assert "the following arguments are required: ACTION" in capsys.readouterr().err


def test_garbage_file_is_reported(cache_dir, capsys):
    cache_dir.mkdir()
    (cache_dir / CACHE_FILE).write_bytes(b"this is not sqlite at all\n" * 100)
    status, out, _ = verify(capsys, f"--cache-dir={cache_dir}")
    assert status == 1
    assert out == [f"{cache_dir / CACHE_FILE}: not a readable sqlite database (file is not a database)"]


def test_truncated_file_is_reported(cache_dir, capsys):
    make_cache(cache_dir, rows=200)  # many pages, so half the file cuts the b-tree
    path = cache_dir / CACHE_FILE
    data = path.read_bytes()
    assert len(data) > 8 * 4096
    path.write_bytes(data[: len(data) // 2])
    status, out, _ = verify(capsys, f"--cache-dir={cache_dir}")
    assert status == 1
    assert out and all(line.startswith(f"{path}: ") for line in out), out


def test_file_without_the_calls_table_is_reported(cache_dir, capsys):
    cache_dir.mkdir()
    with sqlite3.connect(cache_dir / CACHE_FILE) as db:
        db.execute("CREATE TABLE other (x)")
    db.close()
    assert verify(capsys, f"--cache-dir={cache_dir}")[:2] == (1, [f"{cache_dir / CACHE_FILE}: no calls table"])


def test_verify_changes_nothing(cache_dir):
    keys = make_cache(cache_dir, rows=3)
    tamper(cache_dir, "UPDATE calls SET response = 'x' WHERE key = ?", keys[0])
    before = (cache_dir / CACHE_FILE).read_bytes()
    rows, problems = verify_cache(cache_dir)
    assert (rows, len(problems)) == (3, 1)
    assert (cache_dir / CACHE_FILE).read_bytes() == before
    # A read-only reader of a WAL database may leave sqlite's -wal/-shm beside it, but
    # writes no frame to the log.
    wal = cache_dir / f"{CACHE_FILE}-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_command_line_entry_point(cache_dir, tmp_path):
    make_cache(cache_dir, rows=2)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_socialbias", "cache", "verify", "--cache-dir", str(cache_dir)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "2 entries OK\n", "")
