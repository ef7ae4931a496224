"""mkdocs hooks: the README is the site's home page, so it is written once. Its links into
``docs/`` are made relative to the site (``docs/operations.md`` → ``operations.md``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page


def on_files(files: Files, config: Any) -> Files:
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=readme.read_text()))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"\]\(docs/", "](", markdown)
