"""Reports of a run: the terminal summary, the JSON report (and its schema), the HTML page
and JUnit properties. Each takes the run's frozen RunResult (result.py) and nothing else:
the HTML page is drawn from the JSON report built from it (so the page shows what the
file holds). Numbers read the same in the terminal and the page (formatting.py)."""

from __future__ import annotations


def write_files(result) -> list[str]:
    """The JSON report and the HTML page the options asked for, each written whole or not
    at all (files.write_atomically). Returns a message per file that could not be written
    (a full disk, a read-only folder): an earlier file at that path is removed, so that
    no later step reads an old report as this run's."""
    if result.report_path is None and result.html_path is None:
        return []
    from .json_report import build_report, write_json

    report = build_report(result)
    problems = []
    for option, path, write in (
        ("--socialbias-report", result.report_path, write_json),
        ("--socialbias-html", result.html_path, _write_html),
    ):
        if path is None:
            continue
        try:
            write(report, path)
        except OSError as exc:
            problems.append(_unwritten(option, path, exc))
    return problems


def _write_html(report: dict, path) -> None:
    from .html_report import write_html

    write_html(report, path)


def _unwritten(option: str, path, exc: OSError) -> str:
    from pathlib import Path

    stale = ""
    try:
        Path(path).unlink()
        stale = "; the report an earlier run left there was removed"
    except FileNotFoundError:
        pass
    except OSError as removal:
        stale = f"; the report an earlier run left there could not be removed either ({removal.strerror})"
    return (
        f"{option}={path}: the report could not be written ({exc.strerror or exc}){stale}. "
        "Free space on that disk or give a writable path; the run fails rather than leave no report"
    )
