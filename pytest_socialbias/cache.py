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

import asyncio
import errno
import hashlib
import json
import os
import socket
import sqlite3
import time
import uuid
from pathlib import Path

from .errors import CacheError, ConfigError

RECORD_MODES = ("none", "new", "all", "off")
#: ``older:AGE``: like ``new``, and also asks again what an earlier run recorded more than
#: AGE ago (a model updated behind the same name is measured again on a schedule).
OLDER = "older"
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
CACHE_FILE = "calls.sqlite3"
#: 2: keys hash the asked request, the sent one and the run that recorded it are columns
#: of their own (1: keys hashed the request as sent, adaptations included).
SCHEMA_VERSION = 2
#: Lock files that let one process at a time check an endpoint (models/client.py).
CHECK_LOCK_FOLDER = "locks"
#: Seconds between two tries at a check lock that another process holds.
LOCK_POLL_S = 0.05
BUSY_TIMEOUT_MS = 60_000
#: Seconds between two looks at a request another process is asking (``CallCache.claim``).
CLAIM_POLL_S = 0.1
#: A claim older than this is taken over, whatever holds it (no call takes so long).
CLAIM_STALE_S = 900.0


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_record_mode(raw: str) -> tuple[str, float | None]:
    """``(mode, max_age_seconds)`` of a record mode: one of RECORD_MODES (no age), or
    ``older:AGE`` with AGE a whole number and a unit s, m, h, d or w (``older:7d``).
    ValueError, saying what is expected, otherwise."""
    raw = str(raw).strip()
    if raw in RECORD_MODES:
        return raw, None
    expected = (f"expected one of {', '.join(RECORD_MODES)}, or {OLDER}:AGE to also ask again what was recorded "
                "more than AGE ago (e.g. older:7d; units s, m, h, d, w)")
    name, _, age = raw.partition(":")
    if name != OLDER:
        raise ValueError(expected)
    number, unit = age[:-1], age[-1:]
    if not number.isdigit() or unit not in AGE_UNITS or int(number) == 0:
        raise ValueError(f"the age {age!r} is not a whole number > 0 followed by s, m, h, d or w; " + expected)
    return OLDER, int(number) * AGE_UNITS[unit]


def cache_key(request: dict) -> str:
    """sha256 of the canonical JSON of the request description (see Model._request)."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class CallCache:
    """One sqlite connection per process; used from the process's model-call thread."""

    def __init__(self, directory: str | Path, mode: str, run: str | None = None, verify: bool = False):
        """Open (or create) the cache of ``directory`` for ``mode``; ``verify``: run
        sqlite's quick check first, so a damaged file is a usage error before any work.
        ConfigError, saying what to do, when it cannot be used."""
        self.mode, max_age = parse_record_mode(mode)
        if self.mode == "off":
            raise ValueError(f"CallCache needs a record mode in none/new/all/older:AGE, got {mode!r}")
        #: ``older:AGE``: rows an earlier run recorded before this time are asked again.
        self.stale_before = time.time() - max_age if max_age is not None else None
        #: The run writing (shared by its xdist workers): ``all`` re-records what earlier
        #: runs recorded, and reuses what this run did.
        self.run = run or uuid.uuid4().hex
        self.directory = Path(directory)
        self.path = self.directory / CACHE_FILE
        self._locks: dict = {}
        self.read_only = False  # a replay of a cache in a folder it cannot write
        #: Who this process is in the claims table, and the keys it holds claims on.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._claimed: set = set()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
            if self.read_only:
                self.recorded_by = self._read_schema_version()
            else:
                self._create_tables()
                self.recorded_by = self._schema_version()
            if verify:
                problems = [row[0] for row in self._db.execute("PRAGMA quick_check")]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("database disk image is malformed: " + "; ".join(problems[:3]))
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"--socialbias-cache-dir={self.directory}: {cache_problem(exc, self.directory)}") from None

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False,
            )
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            _set_wal(db)
            # NORMAL is crash-safe in WAL mode (a killed process loses nothing committed).
            db.execute("PRAGMA synchronous=NORMAL")
            return db
        except sqlite3.OperationalError as exc:
            if self.mode != "none" or not self.path.exists() or kind_of(exc) not in ("read-only", "unopenable"):
                raise
        # A replay reads a cache it may not write (a CI artifact in a read-only folder):
        # immutable, as nothing writes it while this run reads.
        self.read_only = True
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?immutable=1", uri=True, check_same_thread=False)

    def _create_tables(self) -> None:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS calls ("
            " key TEXT PRIMARY KEY, role TEXT NOT NULL, provider TEXT NOT NULL,"
            " model TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL,"
            " created REAL NOT NULL, sent TEXT, run TEXT, unreadable INTEGER NOT NULL DEFAULT 0,"
            " asked INTEGER NOT NULL DEFAULT 1)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)")
        # What the run learnt about an endpoint (a parameter it rejects, the budget its
        # reasoning needs, how it constrains answers), so later calls, workers and
        # replays send (and report) the same.
        self._db.execute("CREATE TABLE IF NOT EXISTS adaptations (endpoint TEXT PRIMARY KEY, data TEXT NOT NULL)")
        # Which process is asking a request now (``claim``), so that runs recording into
        # one cache at once pay for each call once.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, pid INTEGER NOT NULL,"
            " host TEXT NOT NULL, created REAL NOT NULL)"
        )
        # Which roles of an endpoint were checked (models/client.py), and by which run.
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS checks (endpoint TEXT NOT NULL, role TEXT NOT NULL,"
            " run TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (endpoint, role))"
        )

    def _read_schema_version(self) -> int:
        rows = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        return int(rows.get("migrated_from") or rows.get("schema_version") or SCHEMA_VERSION)

    def _schema_version(self) -> int:
        """The file's schema version, brought up to this one (the version it had is
        returned: rows of schema 1 are kept, but their judge keys were computed another
        way, so a replay may not find them)."""
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        found = int(self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0])
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(calls)")]
        if self.mode != "none" and tuple(columns) != CALL_COLUMNS:
            for column, kind in NEW_COLUMNS:
                if column not in columns:
                    self._db.execute(f"ALTER TABLE calls ADD COLUMN {column} {kind}")
        if found < SCHEMA_VERSION and self.mode != "none":
            self._db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('migrated_from', ?)", (str(found),))
        migrated = self._db.execute("SELECT value FROM meta WHERE name = 'migrated_from'").fetchone()
        return int(migrated[0]) if migrated else found

    def get(self, key: str) -> dict | None:
        """The recorded answer to ``key``, or None to ask it (again). A replay returns
        every recorded answer; ``new`` asks again an answer marked unreadable by an
        earlier run (``unreadable``), at most MAX_REASKS times in all; ``all`` asks every
        request again, once per run; ``older:AGE`` is ``new`` that also asks again, once,
        what an earlier run recorded more than AGE before this run began."""
        if self.mode == "all":  # re-record what earlier runs recorded, once in this run
            row = self._execute("SELECT response FROM calls WHERE key = ? AND run = ?", (key, self.run)).fetchone()
            return json.loads(row[0]) if row else None
        row = self._execute(
            "SELECT response, unreadable, asked, run, created FROM calls WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        response, unreadable, asked, run, created = row
        if self.mode in ("new", OLDER) and unreadable and asked < MAX_REASKS and run != self.run:
            return None
        if self.mode == OLDER and created < self.stale_before and run != self.run:
            return None
        return json.loads(response)

    def mark_unreadable(self, key: str) -> None:
        """The answer stored under ``key`` could not be read (a judge's, a guard's): the
        next recording run asks it again (see ``get``). A replay writes nothing."""
        if self.mode == "none" or self.read_only:
            return
        self._execute("UPDATE calls SET unreadable = 1 WHERE key = ?", (key,))

    def put(self, key: str, role: str, request: dict, response: dict, sent: dict | None = None) -> None:
        """Keep ``response`` under ``key`` (the sha256 of ``request``, the asked request);
        ``sent``: the request as it went over the wire, where it differs."""
        # New rows are inserted; a row asked again because its answer was unreadable (or,
        # with older:AGE, was too old) gets the new answer and counts the asking; any other
        # row stays as it was recorded.
        if self.mode == "all":
            when, stale = "", ()
        elif self.mode == OLDER:
            when, stale = " WHERE calls.unreadable = 1 OR (calls.created < ? AND calls.run IS NOT ?)", (
                self.stale_before, self.run)
        else:
            when, stale = " WHERE calls.unreadable = 1", ()
        upsert = (
            " ON CONFLICT(key) DO UPDATE SET request = excluded.request, response = excluded.response,"
            " created = excluded.created, sent = excluded.sent, run = excluded.run, unreadable = 0,"
            " asked = CASE WHEN calls.unreadable = 1 THEN calls.asked + 1 ELSE 1 END" + when
        )
        self._execute(
            "INSERT INTO calls (key, role, provider, model, request, response, created, sent, run)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)" + upsert,
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
                *stale,
            ),
        )
        self.release(key)  # asked and kept: the claim has done its work

    async def claim(self, key: str) -> dict | None:
        """Before ``key`` is asked (it missed): None when this process may ask it, holding
        the claim on it until ``put`` or ``release``; or the answer another process
        recorded while this one waited for that process's claim to end. So runs (and
        xdist workers) recording into one cache at once pay for each call once. A claim
        whose process is gone (killed on this machine) or that is older than
        CLAIM_STALE_S is taken over. A replay claims nothing."""
        if self.mode == "none" or self.read_only:
            return None
        while True:
            if self._take_claim(key):
                stored = self.get(key)  # recorded between this process's miss and its claim
                if stored is not None:
                    self.release(key)
                return stored
            await asyncio.sleep(CLAIM_POLL_S)
            stored = self.get(key)
            if stored is not None:
                return stored

    def release(self, key: str) -> None:
        """End this process's claim on ``key`` (asked and kept, failed or cancelled)."""
        if key in self._claimed:
            self._claimed.discard(key)
            try:
                self._execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
            except CacheError:
                pass  # the cache failed (said where it wrote); a claim left is taken over when this process is gone

    def _take_claim(self, key: str) -> bool:
        now = time.time()
        row = (key, self.owner, os.getpid(), socket.gethostname(), now)
        if self._execute("INSERT OR IGNORE INTO claims VALUES (?, ?, ?, ?, ?)", row).rowcount == 1:
            self._claimed.add(key)
            return True
        held = self._execute("SELECT owner, pid, host, created FROM claims WHERE key = ?", (key,)).fetchone()
        if held is None or not _stale_claim(*held[1:], now):
            return False  # released just now (the next try takes it), or held by a live process
        taken = self._execute("UPDATE claims SET owner = ?, pid = ?, host = ?, created = ? WHERE key = ? AND owner = ?",
                              (*row[1:], key, held[0])).rowcount == 1
        if taken:
            self._claimed.add(key)
        return taken

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
        self._execute("BEGIN IMMEDIATE")
        try:
            row = self._execute("SELECT data FROM adaptations WHERE endpoint = ?", (endpoint,)).fetchone()
            data = change(json.loads(row[0]) if row else {})
            self._execute(
                "INSERT OR REPLACE INTO adaptations (endpoint, data) VALUES (?, ?)", (endpoint, canonical_json(data))
            )
            self._execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return data

    def checked_by(self, endpoint: str, role: str) -> str | None:
        """The run that checked this role of the endpoint, or None."""
        row = self._execute("SELECT run FROM checks WHERE endpoint = ? AND role = ?", (endpoint, role)).fetchone()
        return row[0] if row else None

    def checked_in(self, endpoint: str, run: str) -> bool:
        """Whether ``run`` checked any role of the endpoint."""
        return self._execute("SELECT 1 FROM checks WHERE endpoint = ? AND run = ?", (endpoint, run)).fetchone() is not None

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
                    raise CacheError(cache_problem(exc, self.directory)) from exc
                time.sleep(0.05 * (attempt + 1))
            except (sqlite3.Error, OSError) as exc:
                raise CacheError(cache_problem(exc, self.directory)) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._db.close()


async def take_lock(lock) -> None:
    """Take a check lock from a coroutine, without a thread: each try does not block, and
    between tries the coroutine sleeps. A task cancelled while it waits (an interrupt, a
    run's end) is cancelled in its sleep, holding nothing. A thread left blocked in
    ``acquire`` would take the lock after its task was gone and hold it for the rest of
    the process: the next run in that process waited for it forever, and so did the
    interpreter's exit."""
    from filelock import Timeout

    while True:
        try:
            lock.acquire(blocking=False)
            return
        except Timeout:
            await asyncio.sleep(LOCK_POLL_S)


def _stale_claim(pid: int, host: str, created: float, now: float) -> bool:
    """Whether a claim's process is gone (on this machine: no such process, or this one:
    a killed process whose number this one got, or an earlier run in this process) or
    the claim is older than any call takes."""
    if now - created > CLAIM_STALE_S:
        return True
    if host != socket.gethostname():
        return False
    if pid == os.getpid():
        return True  # not this CallCache's (its owner differs), so nothing asks it any more
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _set_wal(db: sqlite3.Connection) -> None:
    """Put the file in WAL mode (it stays so). The switch needs the file to itself, and
    sqlite answers "database is locked" at once, without waiting out the busy timeout,
    when another process opens or switches the same new file at that moment (two runs
    started together on a fresh cache): so it is tried again until the timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.01
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def kind_of(exc: BaseException) -> str:
    """What went wrong with the cache file: ``full`` (no space left), ``read-only``,
    ``damaged`` (a truncated or corrupted file), ``unopenable``, ``too-big`` (a value over
    sqlite's limit: the file is fine), or ``other``."""
    if isinstance(exc, OSError):
        return {errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EROFS: "read-only", errno.EACCES: "read-only",
                errno.EPERM: "read-only"}.get(exc.errno, "other")
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return "full"
    if name.startswith("SQLITE_READONLY") or "readonly" in text or "read-only" in text:
        return "read-only"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return "damaged"
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return "unopenable"
    if name.startswith("SQLITE_TOOBIG") or "too big" in text:
        return "too-big"
    return "other"


def cache_problem(exc: BaseException, directory: Path) -> str:
    """What is wrong with the cache under ``directory``, and what to do about it."""
    kind = kind_of(exc)
    if directory.exists() and not directory.is_dir():
        return f"cannot open the cache: {directory} is a file, not a folder; name a folder, or pass --socialbias-record=off"
    if kind in ("unopenable", "other") and directory.is_dir() and not os.access(directory, os.W_OK):
        kind = "read-only"  # sqlite cannot create its journal beside the file
    if kind == "full":
        return (f"the disk holding the cache is full ({exc}): free space there, or point --socialbias-cache-dir "
                "at another disk; what was recorded before is kept")
    if kind == "read-only":
        return (f"the cache folder cannot be written ({exc}): make it writable, point --socialbias-cache-dir at a "
                "writable folder, replay it as it is with --socialbias-record=none, or run without a cache "
                "(--socialbias-record=off)")
    if kind == "too-big":
        return (f"an answer is too big to record ({exc}): the cache is fine; lower the model spec's "
                "?max_answer_bytes= (default 1 MB) so that such an answer is an error before it is recorded")
    if kind == "damaged":
        return (f"the cache file {directory / CACHE_FILE} is damaged ({exc}): run `python -m pytest_socialbias cache "
                f"verify --repair --cache-dir {directory}` to salvage what is readable into a new file, or delete it "
                "(its answers are then asked again)")
    return (f"cannot open the cache ({exc}); point --socialbias-cache-dir at a writable folder on a local disk, "
            "or pass --socialbias-record=off")


# --------------------------------------------------------------------------- the table

#: Columns of the calls table, in order (what CallCache creates and writes).
CALL_COLUMNS = ("key", "role", "provider", "model", "request", "response", "created", "sent", "run", "unreadable", "asked")
#: Columns added since schema 1, with their declarations.
NEW_COLUMNS = (("sent", "TEXT"), ("run", "TEXT"), ("unreadable", "INTEGER NOT NULL DEFAULT 0"),
               ("asked", "INTEGER NOT NULL DEFAULT 1"))
#: An answer marked unreadable is asked again by later recording runs, this many times
#: in all counting the first (so a judge that never answers readably is not paid forever).
MAX_REASKS = 3
