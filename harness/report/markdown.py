"""The report as GitHub-flavoured Markdown: figures linked beside it, long tables in <details>."""
from __future__ import annotations

from harness.report.document import Block, Document, Fold, Image, Section, Table, Text


def render(doc: Document) -> str:
    parts = [f"# {doc.title}\n"]
    parts += [_block(b) for b in doc.intro]
    parts.append("\n".join(f"{i}. [{s.title}](#{s.anchor})" for i, s in
                           enumerate(doc.sections, 1)) + "\n")
    parts += [_section(s) for s in doc.sections]
    return "\n".join(parts)


def _section(section: Section) -> str:
    # An explicit anchor: GitHub's own slug of the title would differ from the HTML page's.
    head = f'<a id="{section.anchor}"></a>\n\n## {section.title}\n'
    return "\n".join([head, *(_block(b) for b in section.blocks)])


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return _escape(block.text) + "\n"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return f"![{_escape(block.caption)}]({block.path})\n\n*{_escape(block.caption)}*\n"
    if isinstance(block, Fold):
        # Blank lines around the content let GitHub render Markdown inside the HTML element.
        inner = "\n".join(_block(b) for b in block.blocks)
        return f"<details><summary>{_escape(block.summary)}</summary>\n\n{inner}\n</details>\n"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _table(table: Table) -> str:
    numeric = table.numeric or (False,) * len(table.headers)
    title = [f"### {_escape(table.title)}", ""] if table.title else []
    lines = [*title, "| " + " | ".join(_escape(h) for h in table.headers) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    """Pipes would split a cell; angle brackets would open HTML; asterisks would emphasise."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")
            .replace(">", "&gt;").replace("*", "\\*"))
