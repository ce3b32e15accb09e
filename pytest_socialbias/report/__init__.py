"""Reports of a run: the terminal summary, the JSON report (and its schema), the HTML page
and JUnit properties. Each takes the run's frozen RunResult (result.py) and nothing else."""

from __future__ import annotations


def write_files(result) -> None:
    """The JSON report and the HTML page the options asked for."""
    if result.report_path is None and result.html_path is None:
        return
    from .json_report import build_report, write_json

    report = build_report(result)
    if result.report_path is not None:
        write_json(report, result.report_path)
    if result.html_path is not None:
        from .html_report import write_html

        write_html(report, result.html_path)
