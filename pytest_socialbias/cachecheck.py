"""Checking, repairing and merging record/replay caches (``python -m pytest_socialbias
cache verify [--repair]``, ``cache merge``): read-only checks of the sqlite file and of
every row, the salvage of a damaged file into a new one, and the merge of the caches of
a run's shards into one. Apart from cache.py, which runs record and replay, so
that the store itself never reaches up into the models package (a row's response is
checked against models.base.ChatResponse here).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cache import BUSY_TIMEOUT_MS, CACHE_FILE, CALL_COLUMNS, SCHEMA_VERSION, cache_key
from .errors import ConfigError
from .models.base import ChatResponse


def verify_cache(directory: str | Path) -> tuple[int, list[str]]:
    """Check the cache under ``directory`` without changing it: (rows checked, problems).

    Checks sqlite's ``PRAGMA integrity_check``, the calls table and its columns, and per
    row that request and response are JSON objects, that the key is the sha256 of the
    canonical request (so a lookup finds it) and that the response has every field a
    ChatResponse requires. Each problem names the row's key. ConfigError when there is nothing to check.
    """

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
    if tuple(columns) not in (CALL_COLUMNS, CALL_COLUMNS[:7]):  # schema 1 had the first seven
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


# --------------------------------------------------------------------------- repair

#: Rows read per query while salvaging; a query that fails is retried row by row.
SALVAGE_CHUNK = 500
#: Row ids tried one by one past the last readable one before giving up on the rest.
SALVAGE_GAP = 5_000


@dataclass
class Repair:
    """What ``repair_cache`` did: entries salvaged into the new file, rows that could not
    be read, rows read but unsound (verify's checks), and where the damaged file went."""

    salvaged: int = 0
    unreadable: int | None = 0  # None: how many is unknown (the table's last page is lost)
    unsound: int = 0
    damaged_copy: Path | None = None
    needed: bool = True


def repair_cache(directory: str | Path) -> Repair:
    """Salvage what is readable of a damaged cache under ``directory`` into a new file.

    The damaged file (with its WAL) is read from a copy, so it is never changed; every
    row that reads back and passes verify's checks goes into a new file, written beside
    it and then moved into place; the damaged one is kept as
    ``calls.sqlite3.damaged-<time>`` for the user to delete. A sound cache is left as it
    is (``needed`` False). No run may use the cache meanwhile."""
    import tempfile


    directory = Path(directory)
    rows, problems = verify_cache(directory)  # ConfigError where there is nothing to repair
    if not problems:
        return Repair(salvaged=rows, needed=False)
    result = Repair()
    fields = list(ChatResponse.REQUIRED_FIELDS)
    path = directory / CACHE_FILE
    new_path = directory / f".{CACHE_FILE}.repairing"
    for leftover in (new_path, Path(f"{new_path}-wal"), Path(f"{new_path}-shm")):
        leftover.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        new = sqlite3.connect(new_path, isolation_level=None)
        try:
            _new_tables(new)
            new.execute("BEGIN")
            # Read twice, from copies: as it is (with its WAL, whose frames may hold the
            # latest rows), then with its header mended (a truncated file's header still
            # counts the lost pages, and sqlite then reads no page at all).
            for attempt, mend in enumerate((False, True)):
                old = _damaged_copy(path, Path(scratch) / f"copy-{attempt}", mend)
                if old is None:
                    continue
                counts = Repair()
                for row in _salvage(old, "calls", counts):
                    data = dict(zip(CALL_COLUMNS, row))
                    if _row_problems(data["key"], data["request"], data["response"], fields):
                        counts.unsound += 1
                        continue
                    defaults = {"unreadable": 0, "asked": 1}
                    inserted = new.execute(
                        f"INSERT OR IGNORE INTO calls VALUES ({', '.join('?' * len(CALL_COLUMNS))})",
                        tuple(data.get(column, defaults.get(column)) for column in CALL_COLUMNS),
                    ).rowcount
                    result.salvaged += inserted
                if attempt == 0 or counts.unreadable is not None:
                    result.unreadable = counts.unreadable
                result.unsound = max(result.unsound, counts.unsound)
                for table, width in (("adaptations", 2), ("checks", 4), ("meta", 2)):
                    for row in _salvage(old, table, Repair()):
                        if len(row) == width:
                            new.execute(f"INSERT OR IGNORE INTO {table} VALUES ({', '.join('?' * width)})", row)
                old.close()
            new.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            new.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))
            new.execute("COMMIT")
            new.execute("PRAGMA journal_mode=WAL")
        finally:
            new.close()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    result.damaged_copy = directory / f"{CACHE_FILE}.damaged-{stamp}"
    os.replace(path, result.damaged_copy)
    if Path(f"{path}-wal").exists():  # its frames may hold the latest rows: kept with it
        os.replace(f"{path}-wal", f"{result.damaged_copy}-wal")
    Path(f"{path}-shm").unlink(missing_ok=True)  # an index of the WAL, rebuilt from it
    os.replace(new_path, path)
    return result


def _damaged_copy(path: Path, copy: Path, mend: bool) -> sqlite3.Connection | None:
    """A connection to a copy of the damaged file (and its WAL, unless ``mend``). Mended:
    the header's page count cut to the pages the file has, and the rollback journal
    instead of the WAL, so that sqlite reads what pages there are."""
    import shutil

    shutil.copyfile(path, copy)
    if not mend and Path(f"{path}-wal").exists():
        shutil.copyfile(f"{path}-wal", f"{copy}-wal")
    if mend:
        with open(copy, "r+b") as handle:
            header = handle.read(100)
            if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
                return None  # not even the header: nothing sqlite can read
            page_size = int.from_bytes(header[16:18], "big")
            page_size = 65536 if page_size == 1 else page_size
            pages = copy.stat().st_size // page_size if page_size else 0
            if pages and int.from_bytes(header[28:32], "big") > pages:
                handle.seek(28)
                handle.write(pages.to_bytes(4, "big"))
            handle.seek(18)
            handle.write(bytes([1, 1]))
    try:
        db = sqlite3.connect(copy, isolation_level=None)
        db.execute("PRAGMA cell_size_check=ON")
        return db
    except sqlite3.Error:
        return None


def _new_tables(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, role TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,"
        " request TEXT NOT NULL, response TEXT NOT NULL, created REAL NOT NULL, sent TEXT, run TEXT,"
        " unreadable INTEGER NOT NULL DEFAULT 0, asked INTEGER NOT NULL DEFAULT 1)"
    )
    db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE adaptations (endpoint TEXT PRIMARY KEY, data TEXT NOT NULL)")
    db.execute(
        "CREATE TABLE checks (endpoint TEXT NOT NULL, role TEXT NOT NULL, run TEXT NOT NULL, created REAL NOT NULL,"
        " PRIMARY KEY (endpoint, role))"
    )


def _salvage(db: sqlite3.Connection, table: str, result: Repair):
    """The rows of ``table`` that can be read, by row id: in chunks while the pages read,
    row by row past a chunk that does not; counts the ids that fail in ``result``."""
    try:
        top = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        top = None  # the table's last page is unreadable: walk until a long gap
        result.unreadable = None
    last = 0
    while top is None or last < top:
        try:
            rows = db.execute(
                f"SELECT rowid, * FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT {SALVAGE_CHUNK}", (last,)
            ).fetchall()
        except sqlite3.Error:
            rows = None
        if rows:
            for row in rows:
                yield row[1:]
            last = rows[-1][0]
            continue
        if rows == [] and top is None:
            return
        # The chunk does not read (or is empty below the top): one id at a time.
        found = False
        limit = last + SALVAGE_GAP if top is None else min(top, last + SALVAGE_CHUNK)
        for rowid in range(last + 1, limit + 1):
            try:
                row = db.execute(f"SELECT rowid, * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.Error:
                if result.unreadable is not None:
                    result.unreadable += 1
                continue
            if row is not None:
                found = True
                yield row[1:]
        last = limit
        if top is None and not found:
            return


@dataclass
class Merge:
    """What ``merge_caches`` did: entries written, taken from each input, and conflicts
    (one key with different answers): the answer kept and where the others were."""

    written: int = 0
    taken: dict = field(default_factory=dict)  # input folder -> entries it gave
    conflicts: list = field(default_factory=list)  # (key, role, model, kept from, other folders)
    adaptations: int = 0


def merge_caches(inputs: list[Path], output: Path) -> Merge:
    """Merge record/replay caches (the shards of a run each recorded their own) into a new
    cache at ``output``. Every key is kept once; where two caches hold different answers
    to one request, the readable one is kept, then the one recorded last (a shard that
    asked again what was too old, --socialbias-record=older:AGE, holds the new answer),
    then the one of the cache named first, and the conflict is reported. What the runs learnt about
    endpoints is merged as a run's workers merge it (models/adapt.merge). The inputs are
    only read; ``output`` must not hold a cache yet."""
    from .cache import CallCache, canonical_json
    from .models.adapt import merge as merge_adaptations

    output = Path(output)
    if (output / CACHE_FILE).exists():
        raise ConfigError(f"-o {output}: a cache is there already; merge into a new folder")
    for directory in inputs:
        if Path(directory).resolve() == output.resolve():
            raise ConfigError(f"-o {output}: it is one of the inputs; merge into a new folder")
    best: dict[str, tuple] = {}  # key -> (rank, row, folder)
    conflicts: dict[str, set] = {}
    adaptations: dict[str, list] = {}
    result = Merge()
    for order, directory in enumerate(inputs):
        rows, problems = verify_cache(directory)
        if problems:
            raise ConfigError(
                f"{directory}: the cache is damaged ({problems[0]}); run `python -m pytest_socialbias cache verify "
                f"--repair --cache-dir {directory}` first"
            )
        db = sqlite3.connect(f"{(Path(directory) / CACHE_FILE).resolve().as_uri()}?mode=ro", uri=True)
        try:
            columns = [row[1] for row in db.execute("PRAGMA table_info(calls)")]
            wanted = [c for c in CALL_COLUMNS if c in columns]
            result.taken[str(directory)] = 0
            for values in db.execute(f"SELECT {', '.join(wanted)} FROM calls"):
                row = dict(zip(wanted, values))
                rank = (int(row.get("unreadable") or 0), -float(row["created"]), order)
                key = row["key"]
                held = best.get(key)
                if held is not None and canonical_json(json.loads(held[1]["response"])) != canonical_json(
                        json.loads(row["response"])):
                    conflicts.setdefault(key, set()).update({held[2], str(directory)})
                if held is None or rank < held[0]:
                    best[key] = (rank, row, str(directory))
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "adaptations" in tables:
                for endpoint, data in db.execute("SELECT endpoint, data FROM adaptations"):
                    adaptations.setdefault(endpoint, []).append(json.loads(data))
        finally:
            db.close()
    target = CallCache(output, "new")
    try:
        db = target._db
        db.execute("BEGIN IMMEDIATE")
        for key in sorted(best):
            _, row, _ = best[key]
            values = [row.get(c) for c in CALL_COLUMNS]
            defaults = {"unreadable": 0, "asked": 1}
            values = [defaults.get(c, None) if v is None and c in defaults else v for c, v in zip(CALL_COLUMNS, values)]
            db.execute(f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) VALUES ({', '.join('?' * len(CALL_COLUMNS))})",
                       values)
        for endpoint, found in sorted(adaptations.items()):
            db.execute("INSERT OR REPLACE INTO adaptations (endpoint, data) VALUES (?, ?)",
                       (endpoint, canonical_json(merge_adaptations(found))))
        db.execute("COMMIT")
    finally:
        target.close()
    for key in sorted(best):
        folder = best[key][2]
        result.taken[folder] = result.taken.get(folder, 0) + 1
    result.written = len(best)
    result.adaptations = len(adaptations)
    for key in sorted(conflicts):
        _, row, kept = best[key]
        result.conflicts.append((key, row["role"], row["model"], kept, sorted(conflicts[key] - {kept})))
    return result
