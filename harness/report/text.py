"""Report blocks as plain text for a terminal: the CLI prints the report's own tables, so the
two never say different numbers. Figures are left out (a terminal cannot show them)."""
from __future__ import annotations

import textwrap

from harness.report.document import Block, Fold, Image, Table, Text

WIDTH = 100     # paragraphs wrap here; tables keep their rows whole however wide


def render(blocks: list[Block] | tuple[Block, ...]) -> str:
    return "\n\n".join(part for part in (_block(b) for b in blocks) if part)


def _block(block: Block) -> str:
    if isinstance(block, Text):
        return textwrap.fill(block.text, WIDTH)
    if isinstance(block, Table):
        return table(block)
    if isinstance(block, Fold):
        return f"{block.summary}:\n\n{render(block.blocks)}"
    if isinstance(block, Image):
        return ""
    raise TypeError(f"unknown report block {type(block).__name__}")


def table(t: Table) -> str:
    """Columns padded to their widest cell; numbers right-aligned as on the pages."""
    numeric = t.numeric or (False,) * len(t.headers)
    widths = [max(len(c) for c in column) for column in zip(t.headers, *t.rows)]
    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w)
                         for c, w, n in zip(cells, widths, numeric)).rstrip()
    title = [t.title] if t.title else []
    return "\n".join([*title, line(t.headers), *(line(r) for r in t.rows)])
