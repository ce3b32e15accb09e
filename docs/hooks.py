"""mkdocs hook: the options page's tables come from the option declarations.

Built with ``mkdocs build --strict`` (mkdocs.yml names this file under ``hooks:``), the
page between the BEGIN/END markers is replaced by ``options.markdown_reference()``, so the
site always shows the options as declared. ``python docs/hooks.py`` rewrites the block in
docs/options.md itself (tests/docs/test_docs.py fails when it is stale).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- BEGIN options[^>]*-->\n)(.*?)(<!-- END options -->)", re.S)
PAGE = Path(__file__).resolve().parent / "options.md"


def current(markdown: str) -> str:
    """``markdown`` with the options block regenerated from the declarations."""
    from pytest_socialbias.options import markdown_reference

    if not BLOCK.search(markdown):
        raise ValueError("docs/options.md has lost its BEGIN/END options markers")
    return BLOCK.sub(lambda m: m.group(1) + markdown_reference() + m.group(3), markdown)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri == "options.md":
        return current(markdown)
    return markdown


if __name__ == "__main__":
    sys.path.insert(0, str(PAGE.parents[1]))
    PAGE.write_text(current(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {PAGE}")
