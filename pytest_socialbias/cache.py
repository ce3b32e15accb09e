"""Record/replay store for model calls: sqlite in WAL mode under the cache dir.

Every completed call is committed at once, so a run killed mid-way (even SIGKILL) keeps
everything it finished; a rerun replays those calls and repeats none. Several xdist
workers may write at once: WAL lets readers and one writer work together, and the busy
timeout makes writers wait for each other instead of failing with "database is locked".
The key never contains an API key or headers, and neither do the stored request/response.

The key is the sha256 of the *asked* request (``Model.request``): what the run asked of
the role, before any adaptation to the endpoint. What went over the wire (a dropped
parameter, a raised budget, the constraint method: models/adapt.py) is stored beside it
(``sent``), so what the run learns about an endpoint, and when, never changes a key: a
replay finds every recorded answer whatever order the record run learnt things in.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from pathlib import Path

from .errors import ConfigError

RECORD_MODES = ("none", "new", "all", "off")
CACHE_FILE = "calls.sqlite3"
#: 2: keys hash the asked request, the sent one and the run that recorded it are columns
#: of their own (1: keys hashed the request as sent, adaptations included).
SCHEMA_VERSION = 2
#: Lock files that let one process at a time check an endpoint (models/client.py).
CHECK_LOCK_FOLDER = "locks"
BUSY_TIMEOUT_MS = 60_000


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(request: dict) -> str:
    """sha256 of the canonical JSON of the request description (see Model._request)."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class CallCache:
    """One sqlite connection per process; used from the process's model-call thread."""

    def __init__(self, directory: str | Path, mode: str, run: str | None = None):
        if mode not in RECORD_MODES or mode == "off":
            raise ValueError(f"CallCache needs a record mode in none/new/all, got {mode!r}")
        self.mode = mode
        #: The run writing (shared by its xdist workers): ``all`` re-records what earlier
        #: runs recorded, and reuses what this run did.
        self.run = run or uuid.uuid4().hex
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        self._locks: dict = {}
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
                " created REAL NOT NULL, sent TEXT, run TEXT)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
            # What the run learnt about an endpoint (a parameter it rejects, the budget its
            # reasoning needs, how it constrains answers), so later calls, workers and
            # replays send (and report) the same.
            self._db.execute("CREATE TABLE IF NOT EXISTS adaptations (endpoint TEXT PRIMARY KEY, data TEXT NOT NULL)")
            # Which roles of an endpoint were checked (models/client.py), and by which run.
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS checks (endpoint TEXT NOT NULL, role TEXT NOT NULL,"
                " run TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (endpoint, role))"
            )
            self.recorded_by = self._schema_version()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(
                f"--socialbias-cache-dir={self.directory}: cannot open the cache "
                f"({exc}); point it at a writable folder, or pass --socialbias-record=off"
            ) from None

    def _schema_version(self) -> int:
        """The file's schema version, brought up to this one (the version it had is
        returned: rows of schema 1 are kept, but their judge keys were computed another
        way, so a replay may not find them)."""
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        found = int(self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0])
        if found < SCHEMA_VERSION and self.mode != "none":
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(calls)")]
            for column in ("sent", "run"):
                if column not in columns:
                    self._db.execute(f"ALTER TABLE calls ADD COLUMN {column} TEXT")
            self._db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_from', ?)", (str(found),))
        migrated = self._db.execute("SELECT value FROM meta WHERE name = 'migrated_from'").fetchone()
        return int(migrated[0]) if migrated else found

    def get(self, key: str) -> dict | None:
        if self.mode == "all":  # re-record what earlier runs recorded, once in this run
            row = self._execute("SELECT response FROM calls WHERE key = ? AND run = ?", (key, self.run)).fetchone()
        else:
            row = self._execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, role: str, request: dict, response: dict, sent: dict | None = None) -> None:
        """Keep ``response`` under ``key`` (the sha256 of ``request``, the asked request);
        ``sent``: the request as it went over the wire, where it differs."""
        verb = "INSERT OR REPLACE" if self.mode == "all" else "INSERT OR IGNORE"
        self._execute(
            f"{verb} INTO calls (key, role, provider, model, request, response, created, sent, run)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                role,
                request.get("provider", ""),
                request.get("model", ""),
                canonical_json(request),
                canonical_json(response),
                time.time(),
                canonical_json(sent) if sent is not None and sent != request else None,
                self.run,
            ),
        )

    def sent(self, key: str) -> dict | None:
        """The request as it went over the wire for ``key`` (the asked one where nothing
        was adapted), or None when there is no such row."""
        row = self._execute("SELECT request, sent FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[1] or row[0]) if row else None

    def get_adaptation(self, endpoint: str) -> dict | None:
        row = self._execute("SELECT data FROM adaptations WHERE endpoint = ?", (endpoint,)).fetchone()
        return json.loads(row[0]) if row else None

    def update_adaptation(self, endpoint: str, change) -> dict:
        """Apply ``change(stored: dict) -> dict`` to the endpoint's stored adaptation in one
        transaction, so that what two processes learn at once is merged, never lost;
        returns what is stored now. A replay never writes (it gets the change applied)."""
        if self.mode == "none":
            return change(self.get_adaptation(endpoint) or {})
        for attempt in range(5):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
        try:
            row = self._db.execute("SELECT data FROM adaptations WHERE endpoint = ?", (endpoint,)).fetchone()
            data = change(json.loads(row[0]) if row else {})
            self._db.execute(
                "INSERT OR REPLACE INTO adaptations (endpoint, data) VALUES (?, ?)", (endpoint, canonical_json(data))
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return data

    def checked_by(self, endpoint: str, role: str) -> str | None:
        """The run that checked this role of the endpoint, or None."""
        row = self._execute("SELECT run FROM checks WHERE endpoint = ? AND role = ?", (endpoint, role)).fetchone()
        return row[0] if row else None

    def put_check(self, endpoint: str, role: str, run: str) -> None:
        if self.mode == "none":
            return
        self._execute(
            "INSERT OR REPLACE INTO checks (endpoint, role, run, created) VALUES (?, ?, ?, ?)",
            (endpoint, role, run, time.time()),
        )

    def check_lock(self, endpoint: str):
        """A lock across processes (xdist workers, separate runs on one cache), held while
        one of them checks ``endpoint`` so that the others take its findings; one lock
        file per endpoint under ``locks/``, one FileLock object per endpoint and cache."""
        from filelock import FileLock

        lock = self._locks.get(endpoint)
        if lock is None:
            folder = self.directory / CHECK_LOCK_FOLDER
            folder.mkdir(exist_ok=True)
            name = hashlib.sha256(endpoint.encode("utf-8")).hexdigest()[:16]
            # Not thread-local: it is taken in a helper thread and released on the loop's.
            lock = self._locks[endpoint] = FileLock(folder / f"{name}.lock", thread_local=False)
        return lock

    def count(self) -> int:
        return self._execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def _execute(self, sql: str, args: tuple = ()):
        # busy_timeout covers lock waits; one extra loop guards the rare SQLITE_BUSY that
        # sqlite returns without waiting (e.g. a WAL checkpoint racing a new writer).
        for attempt in range(5):
            try:
                return self._db.execute(sql, args)
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._db.close()


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


# --------------------------------------------------------------------------- verify

#: Columns of the calls table, in order (what CallCache creates and writes).
CALL_COLUMNS = ("key", "role", "provider", "model", "request", "response", "created", "sent", "run")


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
    if tuple(columns) not in (CALL_COLUMNS, CALL_COLUMNS[:-2]):  # schema 1 had no sent and run
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
