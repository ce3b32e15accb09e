"""Unit tests for cache.py: the sqlite record/replay store and its keys."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_socialbias.cache import CACHE_FILE, CallCache, cache_key, canonical_json, take_lock
from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models import CallPool, Model, check_credentials, parse_spec

REQUEST = {
    "provider": "openai",
    "model": "m",
    "base_url": "http://127.0.0.1:9/v1",
    "params": {"max_tokens": 20, "temperature": 0.0},
    "messages": [{"role": "user", "content": "hi"}],
    "template": "judge_bias@1",
    "sample": 0,
    "top_logprobs": None,
}
RESPONSE = {"text": "No", "finish_reason": "stop", "prompt_tokens": 3, "completion_tokens": 1,
            "logprobs": None, "model": "m"}


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


# --------------------------------------------------------------------------- put / get


def test_put_get_roundtrip(cache_dir):
    cache = CallCache(cache_dir, "new")
    key = cache_key(REQUEST)
    assert cache.get(key) is None
    cache.put(key, "judge", REQUEST, RESPONSE)
    assert cache.get(key) == RESPONSE
    assert cache.count() == 1
    cache.close()
    # committed at once: a fresh connection (another process, a rerun) sees it
    again = CallCache(cache_dir, "none")
    assert again.get(key) == RESPONSE
    assert (cache_dir / CACHE_FILE).is_file()
    again.close()


def test_stored_row_columns(cache_dir):
    cache = CallCache(cache_dir, "new")
    key = cache_key(REQUEST)
    cache.put(key, "judge", REQUEST, RESPONSE)
    cache.close()
    with sqlite3.connect(cache_dir / CACHE_FILE) as db:
        role, provider, model, request, response = db.execute(
            "SELECT role, provider, model, request, response FROM calls WHERE key = ?", (key,)
        ).fetchone()
    assert (role, provider, model) == ("judge", "openai", "m")
    assert json.loads(request) == REQUEST
    assert request == canonical_json(REQUEST)
    assert json.loads(response) == RESPONSE


def test_mode_new_keeps_first_value(cache_dir):
    cache = CallCache(cache_dir, "new")
    key = cache_key(REQUEST)
    cache.put(key, "judge", REQUEST, {"text": "first"})
    cache.put(key, "judge", REQUEST, {"text": "second"})
    assert cache.get(key) == {"text": "first"}
    assert cache.count() == 1


def test_mode_all_ignores_stored_and_overwrites(cache_dir):
    key = cache_key(REQUEST)
    first = CallCache(cache_dir, "new")
    first.put(key, "judge", REQUEST, {"text": "old"})
    first.close()

    rerecord = CallCache(cache_dir, "all")
    assert rerecord.get(key) is None  # re-record everything
    rerecord.put(key, "judge", REQUEST, {"text": "new"})
    assert rerecord.count() == 1
    rerecord.close()

    replay = CallCache(cache_dir, "none")
    assert replay.get(key) == {"text": "new"}
    replay.close()


def test_mode_none_reads(cache_dir):
    key = cache_key(REQUEST)
    writer = CallCache(cache_dir, "new")
    writer.put(key, "judge", REQUEST, RESPONSE)
    writer.close()
    reader = CallCache(cache_dir, "none")
    assert reader.get(key) == RESPONSE
    assert reader.get("0" * 64) is None


@pytest.mark.parametrize("mode", ["off", "replay", "", None])
def test_bad_mode(cache_dir, mode):
    with pytest.raises(ValueError, match="none.*new.*all"):
        CallCache(cache_dir, mode)


def test_unusable_cache_dir_is_config_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as info:
        CallCache(blocker / "cache", "new")
    message = str(info.value)
    assert "--socialbias-cache-dir" in message
    assert str(blocker / "cache") in message
    assert "--socialbias-record=off" in message  # says what to do


def test_cache_file_not_a_database_is_config_error(tmp_path):
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / CACHE_FILE).write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ConfigError, match="--socialbias-cache-dir"):
        CallCache(directory, "new")


# --------------------------------------------------------------------------- cache_key


def test_cache_key_is_hex_sha256_and_stable():
    key = cache_key(REQUEST)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key(json.loads(json.dumps(REQUEST))) == key


def test_cache_key_ignores_dict_key_order():
    reordered = dict(reversed(list(REQUEST.items())))
    reordered["params"] = dict(reversed(list(REQUEST["params"].items())))
    reordered["messages"] = [{"content": "hi", "role": "user"}]
    assert list(reordered) != list(REQUEST)
    assert cache_key(reordered) == cache_key(REQUEST)


@pytest.mark.parametrize(
    "field, value",
    [
        ("model", "m2"),
        ("provider", "anthropic"),
        ("base_url", "http://127.0.0.1:10/v1"),
        ("params", {"max_tokens": 20, "temperature": 0.7}),
        ("params", {"max_tokens": 21, "temperature": 0.0}),
        ("params", {"max_tokens": 20, "temperature": 0.0, "seed": 1}),
        ("messages", [{"role": "user", "content": "hi!"}]),
        ("messages", [{"role": "system", "content": "hi"}]),
        ("messages", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]),
        ("template", "judge_bias@2"),
        ("template", None),
        ("sample", 1),
        ("top_logprobs", 3),
    ],
)
def test_cache_key_changes_with_every_field(field, value):
    changed = {**REQUEST, field: value}
    assert cache_key(changed) != cache_key(REQUEST)


def model(monkeypatch, spec="openai:m@http://127.0.0.1:9/v1", defaults=None):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return Model("target", parse_spec(spec), "--target", CallPool(), defaults or {})


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def test_model_request_keys(monkeypatch):
    target = model(monkeypatch, defaults={"temperature": 0.7, "max_tokens": 250})
    base = target.request(MESSAGES, template=None)
    assert base == {
        "provider": "openai",
        "model": "m",
        "base_url": "http://127.0.0.1:9/v1",
        "params": {"max_tokens": 250, "temperature": 0.7},
        "messages": MESSAGES,
        "template": None,
        "sample": 0,
        "top_logprobs": None,
    }
    keys = {
        cache_key(base),
        cache_key(target.request(MESSAGES, template="user_simulator@1")),
        cache_key(target.request(MESSAGES, sample=1)),
        cache_key(target.request(MESSAGES, temperature=0.0)),
        cache_key(target.request(MESSAGES, top_logprobs=5)),
        cache_key(target.request(MESSAGES[1:])),
        cache_key(model(monkeypatch, "openai:m2@http://127.0.0.1:9/v1").request(MESSAGES)),
    }
    assert len(keys) == 7
    # a None override is no override
    assert target.request(MESSAGES, temperature=None) == base
    # extra fields on messages never reach the key
    noisy = [{**m, "name": "x", "id": 7} for m in MESSAGES]
    assert cache_key(target.request(noisy)) == cache_key(base)


def test_spec_params_win_over_role_defaults_and_over_the_calls_own(monkeypatch):
    target = model(monkeypatch, "openai:m@http://127.0.0.1:9/v1?temperature=0.2",
                   defaults={"temperature": 0.7, "max_tokens": 250})
    assert target.request(MESSAGES)["params"] == {"max_tokens": 250, "temperature": 0.2}
    # A call's parameters beat the role's defaults, never the spec's (a judge asks for
    # temperature 0; a judge spec that says otherwise wins).
    assert target.request(MESSAGES, max_tokens=20, temperature=0.0)["params"] == {"max_tokens": 20, "temperature": 0.2}


def test_a_spec_drops_a_parameter_with_none_and_passes_others_through(monkeypatch):
    spec = "openai:m@http://127.0.0.1:9/v1?temperature=none&top_k=20&chat_template_kwargs={\"enable_thinking\":false}"
    judge = model(monkeypatch, spec, defaults={"temperature": 0.7})
    params = judge.request(MESSAGES, temperature=0.0, max_tokens=20)["params"]
    assert params == {"chat_template_kwargs": {"enable_thinking": False}, "max_tokens": 20, "top_k": 20}
    # Pass-through parameters are parameters: they enter the cache key.
    other = model(monkeypatch, spec.replace("top_k=20", "top_k=40"), defaults={"temperature": 0.7})
    assert cache_key(judge.request(MESSAGES)) != cache_key(other.request(MESSAGES))


def test_transport_settings_do_not_change_the_key(monkeypatch):
    plain = model(monkeypatch, "openai:m@http://127.0.0.1:9/v1")
    tuned = model(monkeypatch, "openai:m@http://127.0.0.1:9/v1?timeout=3&max_retries=0")
    assert cache_key(plain.request(MESSAGES)) == cache_key(tuned.request(MESSAGES))


def test_request_never_contains_the_api_key(monkeypatch):
    secret = "sk-PLANTED-SECRET-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    target = Model("target", parse_spec("openai:m@http://127.0.0.1:9/v1"), "--target", CallPool(), {})
    # the key is really in use for this model (it would be sent to the server)
    assert check_credentials(target.spec, "--target") == secret
    request = target.request(MESSAGES, template="judge_bias@1", sample=2, top_logprobs=3, max_tokens=5)
    text = canonical_json(request)
    assert secret not in text
    assert "api_key" not in text.lower() and "authorization" not in text.lower()


# --------------------------------------------------------------------------- concurrency

WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pytest_socialbias.cache import CallCache

    directory, worker, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    cache = CallCache(directory, "new")
    (go.parent / f"ready-{worker}").touch()
    deadline = time.time() + 300  # longer than the parent waits for every worker to be ready
    while not go.exists():  # start together, to collide as much as possible
        if time.time() > deadline:
            sys.exit("start signal never came")
        time.sleep(0.001)
    for i in range(worker * 100, worker * 100 + 300):
        key = f"key-{i:05d}"
        request = {"provider": "openai", "model": "m", "i": i}
        cache.put(key, "target", request, {"text": f"value-{i}", "worker": worker})
        got = cache.get(key)
        assert got is not None and got["text"] == f"value-{i}", got
    cache.close()
    print("done", worker)
    """
)


def test_concurrent_writers_from_several_processes(tmp_path):
    directory = tmp_path / "shared-cache"
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(directory), str(worker), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for worker in range(4)
    ]
    deadline = time.time() + 30
    while not all((tmp_path / f"ready-{w}").exists() for w in range(4)):
        if time.time() > deadline or any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.01)
    go.touch()  # every worker has opened the cache: now all write at once
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        outputs.append((proc.returncode, out, err))
    for worker, (rc, out, err) in enumerate(outputs):
        assert rc == 0, f"worker {worker} failed:\n{err}"
        assert f"done {worker}" in out

    # workers cover 0..299, 100..399, 200..499, 300..599: 600 distinct keys, overlapping
    cache = CallCache(directory, "none")
    assert cache.count() == 600
    for i in range(600):
        value = cache.get(f"key-{i:05d}")
        assert value is not None, i
        assert value["text"] == f"value-{i}"
        # 'new' keeps the first writer's value: it came from a worker that covers i
        assert value["worker"] * 100 <= i < value["worker"] * 100 + 300
    cache.close()


class _SwitchRefused:
    """A connection whose first switches to WAL are answered "database is locked" at once,
    as sqlite answers a process that opens a new cache file while another switches it."""

    def __init__(self, db, refusals):
        self._db, self.refusals, self.tries = db, refusals, 0

    def execute(self, sql, *args):
        if sql.replace(" ", "").upper() == "PRAGMAJOURNAL_MODE=WAL":
            self.tries += 1
            if self.tries <= self.refusals:
                raise sqlite3.OperationalError("database is locked")
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_opening_a_new_cache_waits_out_another_process_switching_it(tmp_path, monkeypatch):
    """Two runs started together on a fresh cache: the one whose switch to WAL is refused
    tries again instead of failing the run with "cannot open the cache"."""
    connections = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        connections.append(_SwitchRefused(real_connect(*args, **kwargs), refusals=3))
        return connections[-1]

    monkeypatch.setattr("pytest_socialbias.cache.sqlite3.connect", connect)
    cache = CallCache(tmp_path / "fresh", "new")
    cache.put("k", "judge", {"q": 1}, {"text": "x"})
    assert cache.get("k") == {"text": "x"}
    assert connections[0].tries == 4
    assert real_connect(tmp_path / "fresh" / CACHE_FILE).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cache.close()


def test_a_cache_that_stays_locked_is_a_clear_error_after_the_busy_timeout(tmp_path, monkeypatch):
    real_connect = sqlite3.connect
    monkeypatch.setattr("pytest_socialbias.cache.BUSY_TIMEOUT_MS", 300)
    monkeypatch.setattr(
        "pytest_socialbias.cache.sqlite3.connect", lambda *a, **k: _SwitchRefused(real_connect(*a, **k), refusals=10**9)
    )
    with pytest.raises(ConfigError, match=r"cannot open the cache \(database is locked\)"):
        CallCache(tmp_path / "fresh", "new")


def test_an_unreadable_answer_is_asked_again_a_bounded_number_of_times(tmp_path):
    from pytest_socialbias.cache import MAX_REASKS

    request = {"provider": "openai", "model": "j", "messages": [{"role": "user", "content": "biased?"}]}
    key = cache_key(request)
    answer = {"text": "Perhaps.", "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1,
              "logprobs": None, "model": "j"}
    first = CallCache(tmp_path, "new", run="run-1")
    first.put(key, "judge", request, answer)
    first.mark_unreadable(key)
    assert first.get(key) == answer  # within the run that recorded it: as recorded
    asked = 1
    while True:
        later = CallCache(tmp_path, "new", run=f"run-{asked + 1}")
        if later.get(key) is not None:
            break  # the cap: replayed from now on
        later.put(key, "judge", request, {**answer, "text": f"Still unsure ({asked})."})
        later.mark_unreadable(key)
        asked += 1
        later.close()
    assert asked == MAX_REASKS
    assert CallCache(tmp_path, "none").get(key)["text"] == f"Still unsure ({MAX_REASKS - 1})."
    # A readable answer that replaced an unreadable one is kept like any other.
    fresh = CallCache(tmp_path / "other", "new", run="a")
    fresh.put(key, "judge", request, answer)
    fresh.mark_unreadable(key)
    again = CallCache(tmp_path / "other", "new", run="b")
    assert again.get(key) is None
    again.put(key, "judge", request, {**answer, "text": "No"})
    assert CallCache(tmp_path / "other", "new", run="c").get(key)["text"] == "No"


def test_older_mode_asks_again_only_what_an_earlier_run_recorded_before_the_age(tmp_path):
    """--socialbias-record=older:7d: a scheduled job measures a model updated behind the same
    name again; answers younger than the age are replayed, and this run's own answers too."""
    old_request, young_request = REQUEST, {**REQUEST, "sample": 1}
    old_key, young_key = cache_key(old_request), cache_key(young_request)
    first = CallCache(tmp_path, "new", run="monday")
    first.put(old_key, "judge", old_request, RESPONSE)
    first.put(young_key, "judge", young_request, RESPONSE)
    eight_days = 8 * 86_400
    first._db.execute("UPDATE calls SET created = created - ? WHERE key = ?", (eight_days, old_key))
    first.close()

    weekly = CallCache(tmp_path, "older:7d", run="next-monday")
    assert weekly.get(old_key) is None  # older than 7 days: asked again
    assert weekly.get(young_key) == RESPONSE  # 1 second old: replayed
    updated = {**RESPONSE, "text": "Yes"}
    weekly.put(old_key, "judge", old_request, updated)
    assert weekly.get(old_key) == updated  # asked once per run, then this run's answer
    weekly.put(young_key, "judge", young_request, {**RESPONSE, "text": "never stored"})
    assert weekly.get(young_key) == RESPONSE  # a young row is never overwritten
    weekly.close()
    assert CallCache(tmp_path, "none").get(old_key) == updated  # the replay reads the new answer
    assert CallCache(tmp_path, "older:7d", run="again").get(old_key) == updated  # now young again
    assert CallCache(tmp_path, "older:1s", run="later").stale_before > 0


@pytest.mark.parametrize("mode", ["older", "older:", "older:7", "older:0d", "older:7y", "older:-1d", "newer:7d", "old"])
def test_a_bad_record_mode_names_the_forms_it_takes(mode):
    from pytest_socialbias.cache import parse_record_mode

    with pytest.raises(ValueError, match=r"older:AGE .*older:7d"):
        parse_record_mode(mode)
    assert parse_record_mode("older:7d") == ("older", 7 * 86_400)
    assert parse_record_mode("older:12h") == ("older", 12 * 3600)
    assert parse_record_mode("new") == ("new", None)


# --------------------------------------------------------------------------- check locks


def test_a_check_lock_waiter_that_is_cancelled_holds_nothing(cache_dir):
    """A run that ends (or is interrupted) while it waits for another process's endpoint
    check must not take the lock later: held for the rest of the process, it made the
    next run in that process, and the interpreter's exit, wait forever."""
    from filelock import FileLock

    cache = CallCache(cache_dir, "new")
    lock = cache.check_lock('{"model": "m"}')
    other = FileLock(lock.lock_file, thread_local=False)  # another holder, as another process would be
    other.acquire()

    async def wait_then_give_up():
        waiter = asyncio.ensure_future(take_lock(lock))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # it waits while the other holds the lock
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        other.release()
        await asyncio.sleep(0.3)  # time enough for a waiter left behind to take the lock
        assert not lock.is_locked

    try:
        asyncio.run(wait_then_give_up())
    finally:
        if other.is_locked:
            other.release()
    third = FileLock(lock.lock_file, thread_local=False)
    third.acquire(timeout=2)  # free for the next taker
    third.release()

    async def take_and_give_back():
        await take_lock(lock)
        assert lock.is_locked
        lock.release()

    asyncio.run(take_and_give_back())
    assert not lock.is_locked
    cache.close()
