"""The HTML report in a browser: write it for a synthetic (or given) report, screenshot it.

Builds a realistic synthetic report (three suites, six categories, optional sections and
trigger-rate rows; the test suite's builder, scaled up) or reads ``--report FILE`` (a JSON
report from ``--socialbias-report``), writes ``report.html`` and takes screenshots with
headless Chromium: the top of the page, and the whole page with the first cases opened.
Prints the paths, the HTML size and the render time.

    python benchmarks/html_screenshot.py [--out DIR] [--report FILE] [--per-category N]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_socialbias.report.html_report import render_html  # noqa: E402

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
OPENED_CASES = 2


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def synthetic_report(per_category: int) -> dict:
    from tests.test_html_report import make_report

    categories = ("age", "appearance", "disability", "gender", "race", "religion")
    report = make_report(categories=categories, per_category=per_category, turns=10, optional=True, triggers=True)
    failed = any(g.get("verdict") == "fail" for g in report.get("gates") or [])
    report.setdefault("summary", {}).update(
        verdict="fail" if failed else "pass", exit_status=1 if failed else 0,
        gates_file="thresholds.yaml", gates_file_sha256="0" * 64,
    )
    return report


def open_cases(document: str) -> str:
    """A copy with the first cases and the first biased one opened, so the whole-page shot
    shows transcripts (the page itself has no script to open them)."""
    seen = {"cases": 0, "biased": False}

    def maybe_open(match):
        biased = "class=\"v biased\"" in match.group(0)
        if seen["cases"] < OPENED_CASES or (biased and not seen["biased"]):
            seen["cases"] += 1
            seen["biased"] = seen["biased"] or biased
            return match.group(0).replace("<details class=\"case\">", "<details class=\"case\" open>", 1)
        return match.group(0)

    return re.sub(r"<details class=\"case\"><summary>.*?</summary>", maybe_open, document)


def screenshot(browser: str, page: Path, png: Path, height: int) -> None:
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        f"--screenshot={png}", f"--window-size=1280,{height}", page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.exists():
        raise SystemExit(f"{browser} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new folder under /tmp)")
    parser.add_argument("--report", type=Path, default=None, help="a JSON report to render instead of the synthetic one")
    parser.add_argument("--per-category", type=int, default=20, help="synthetic cases per category and suite (default 20)")
    parser.add_argument("--full-height", type=int, default=9000, help="window height of the whole-page screenshot")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="socialbias-html-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        report = json.loads(args.report.read_text(encoding="utf-8"))
    else:
        report = synthetic_report(args.per_category)
    started = time.perf_counter()
    document = render_html(report)
    elapsed = time.perf_counter() - started
    page = out / "report.html"
    page.write_text(document, encoding="utf-8")
    opened = open_cases(document)
    opened_page = out / "report-opened.html"
    opened_page.write_text(opened, encoding="utf-8")
    size = page.stat().st_size
    print(f"html:   {page} ({size / 1024:.0f} KiB, {len(report.get('cases') or [])} cases, rendered in {elapsed:.2f} s)")
    browser = find_browser()
    if browser is None:
        print("no headless browser found (looked for " + ", ".join(BROWSERS) + "); install one, e.g. "
              "apt-get install chromium, to get the screenshots")
        return
    top, full = out / "report-top.png", out / "report-full.png"
    screenshot(browser, page, top, 2400)
    screenshot(browser, opened_page, full, args.full_height)
    print(f"shot:   {top} (1280x2400)")
    print(f"shot:   {full} (1280x{args.full_height}, the first {OPENED_CASES} cases and the first biased one opened)")


if __name__ == "__main__":
    main()
