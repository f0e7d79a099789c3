"""The report as GitHub-flavoured Markdown: figures linked beside it, long tables in <details>."""
from __future__ import annotations

import html
import re

from harness.report.document import Block, Document, Fold, Image, Section, Table, Text


def render(doc: Document) -> str:
    parts = [f"# {_escape(doc.title)}\n"]
    parts += [_block(b) for b in doc.intro]
    parts.append("\n".join(f"{i}. [{_escape(s.title)}](#{s.anchor})" for i, s in
                           enumerate(doc.sections, 1)) + "\n")
    parts += [_section(s) for s in doc.sections]
    return "\n".join(parts)


def _section(section: Section) -> str:
    # An explicit anchor: GitHub's own slug of the title would differ from the HTML page's.
    head = f'<a id="{html.escape(section.anchor)}"></a>\n\n## {_escape(section.title)}\n'
    return "\n".join([head, *(_block(b) for b in section.blocks)])


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return _escape(block.text) + "\n"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return f"![{_escape(block.caption)}]({block.path})\n\n*{_escape(block.caption)}*\n"
    if isinstance(block, Fold):
        # Blank lines around the content let GitHub render Markdown inside the HTML element;
        # the summary itself sits in raw HTML, where only HTML escapes work.
        inner = "\n".join(_block(b) for b in block.blocks)
        summary = html.escape(" ".join(block.summary.split()))
        return f"<details><summary>{summary}</summary>\n\n{inner}\n</details>\n"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _table(table: Table) -> str:
    numeric = table.numeric or (False,) * len(table.headers)
    title = [f"### {_escape(table.title)}", ""] if table.title else []
    lines = [*title, "| " + " | ".join(_escape(h) for h in table.headers) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


# An underscore next to a non-alphanumeric character could open or close emphasis; one inside
# a word (res2a_branch2b) cannot, and stays unescaped so names read as they are.
_EMPHASIS_UNDERSCORE = re.compile(r"_(?![^\W_])|(?<![^\W_])_")
_BACKSLASHED = str.maketrans({c: "\\" + c for c in "|*[]~"})


def _escape(text: str) -> str:
    """Data (titles, layer names) as literal text: no link, image, HTML tag, entity, emphasis,
    table cell or new line can start inside it, so a layer named `[x](javascript:...)` stays
    text. Backticks stay: the report's own sentences use code spans."""
    text = " ".join(text.splitlines()).replace("\\", "\\\\")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _EMPHASIS_UNDERSCORE.sub(r"\\_", text.translate(_BACKSLASHED))
