"""Record/replay store for model calls: sqlite in WAL mode under the cache dir.

Every completed call is committed at once, so a run killed mid-way (even SIGKILL) keeps
everything it finished; a rerun replays those calls and repeats none. Several xdist
workers may write at once: WAL lets readers and one writer work together, and the busy
timeout makes writers wait for each other instead of failing with "database is locked".
The key never contains an API key or headers, and neither do the stored request/response.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

from .errors import ConfigError

RECORD_MODES = ("none", "new", "all", "off")
CACHE_FILE = "calls.sqlite3"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(request: dict) -> str:
    """sha256 of the canonical JSON of the request description (see Model._request)."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class CallCache:
    """One sqlite connection per process; used from the process's model-call thread."""

    def __init__(self, directory: str | Path, mode: str):
        if mode not in RECORD_MODES or mode == "off":
            raise ValueError(f"CallCache needs a record mode in none/new/all, got {mode!r}")
        self.mode = mode
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                check_same_thread=False,
            )
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL is crash-safe in WAL mode (a killed process loses nothing committed).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS calls ("
                " key TEXT PRIMARY KEY, role TEXT NOT NULL, provider TEXT NOT NULL,"
                " model TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL,"
                " created REAL NOT NULL)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
            # What the run learnt about an endpoint (a parameter it rejects, the budget its
            # reasoning needs, how it constrains answers), so replays build the same requests.
            self._db.execute("CREATE TABLE IF NOT EXISTS adaptations (endpoint TEXT PRIMARY KEY, data TEXT NOT NULL)")
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"--socialbias-cache-dir={self.directory}: cannot open the cache "
                f"({exc}); point it at a writable folder, or pass --socialbias-record=off"
            ) from None

    def get(self, key: str) -> dict | None:
        if self.mode == "all":
            return None  # re-record everything
        row = self._execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, role: str, request: dict, response: dict) -> None:
        verb = "INSERT OR REPLACE" if self.mode == "all" else "INSERT OR IGNORE"
        self._execute(
            f"{verb} INTO calls (key, role, provider, model, request, response, created)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                role,
                request.get("provider", ""),
                request.get("model", ""),
                canonical_json(request),
                canonical_json(response),
                time.time(),
            ),
        )

    def get_adaptation(self, endpoint: str) -> dict | None:
        row = self._execute("SELECT data FROM adaptations WHERE endpoint = ?", (endpoint,)).fetchone()
        return json.loads(row[0]) if row else None

    def put_adaptation(self, endpoint: str, data: dict) -> None:
        if self.mode == "none":
            return  # a replay never writes
        self._execute("INSERT OR REPLACE INTO adaptations (endpoint, data) VALUES (?, ?)", (endpoint, canonical_json(data)))

    def count(self) -> int:
        return self._execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def _execute(self, sql: str, args: tuple = ()):
        # busy_timeout covers lock waits; one extra loop guards the rare SQLITE_BUSY that
        # sqlite returns without waiting (e.g. a WAL checkpoint racing a new writer).
        for attempt in range(5):
            try:
                return self._db.execute(sql, args)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._db.close()


# --------------------------------------------------------------------------- verify

#: Columns of the calls table, in order (what CallCache creates and writes).
CALL_COLUMNS = ("key", "role", "provider", "model", "request", "response", "created")


def verify_cache(directory: str | Path) -> tuple[int, list[str]]:
    """Check the cache under ``directory`` without changing it: (rows checked, problems).

    Checks sqlite's ``PRAGMA integrity_check``, the calls table and its columns, and per
    row that request and response are JSON objects, that the key is the sha256 of the
    canonical request (so a lookup finds it) and that the response has every field a
    ChatResponse requires. Each problem names the row's key. ConfigError when there is nothing to check.
    """
    from .models.base import ChatResponse  # the models package imports this module

    directory = Path(directory)
    path = directory / CACHE_FILE
    if not directory.is_dir():
        raise ConfigError(
            f"--cache-dir={directory}: no such folder; pass the folder of the cache (default .socialbias)"
        )
    if not path.is_file():
        raise ConfigError(f"--cache-dir={directory}: no {CACHE_FILE} in it; is it the cache folder of a run?")
    try:
        # Read-only: verifying must never change (or "repair") what it checks.
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        return 0, [f"{path}: cannot open ({exc})"]
    try:
        problems = _file_problems(db, path)
        if problems:
            return 0, problems
        response_fields = list(ChatResponse.REQUIRED_FIELDS)
        rows = 0
        try:
            for key, request, response in db.execute("SELECT key, request, response FROM calls"):
                rows += 1
                problems += [f"key {key}: {p}" for p in _row_problems(key, request, response, response_fields)]
            for key, copies in db.execute("SELECT key, COUNT(*) FROM calls GROUP BY key HAVING COUNT(*) > 1"):
                problems.append(f"key {key}: stored {copies} times")
        except sqlite3.Error as exc:
            problems.append(f"{path}: reading the calls stopped after {rows} rows ({exc})")
        return rows, problems
    finally:
        db.close()


def _file_problems(db: sqlite3.Connection, path: Path) -> list[str]:
    """Problems of the file as a whole: not a database, corrupt pages, missing table."""
    try:
        results = [row[0] for row in db.execute("PRAGMA integrity_check")]
        columns = [row[1] for row in db.execute("PRAGMA table_info(calls)")]
    except sqlite3.Error as exc:
        return [f"{path}: not a readable sqlite database ({exc})"]
    if results != ["ok"]:
        return [f"{path}: integrity check: {line}" for line in results]
    if not columns:
        return [f"{path}: no calls table"]
    if tuple(columns) != CALL_COLUMNS:
        return [f"{path}: calls table has columns {', '.join(columns)}; expected {', '.join(CALL_COLUMNS)}"]
    return []


def _row_problems(key, request: str, response: str, response_fields: list[str]) -> list[str]:
    problems = []
    try:
        request_data = json.loads(request)
    except (TypeError, ValueError) as exc:
        problems.append(f"request is not valid JSON ({exc})")
        request_data = None
    if request_data is not None:
        if not isinstance(request_data, dict):
            problems.append("request is not a JSON object")
        elif cache_key(request_data) != key:
            problems.append(f"key is not the sha256 of the stored request (that is {cache_key(request_data)})")
    try:
        response_data = json.loads(response)
    except (TypeError, ValueError) as exc:
        return problems + [f"response is not valid JSON ({exc})"]
    if not isinstance(response_data, dict):
        return problems + ["response is not a JSON object"]
    missing = [name for name in response_fields if name not in response_data]
    if missing:
        problems.append(f"response lacks {', '.join(missing)}")
    elif not isinstance(response_data["text"], str):
        problems.append("response text is not a string")
    return problems
