"""The report as data: sections of paragraphs, tables, figures and folds.

Built once, then written out by html.py and markdown.py, so both pages always say the same thing.
Cell text is final (already formatted); the writers only escape it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...] = ()      # right-align these columns
    title: str = ""

    def __post_init__(self) -> None:
        width = len(self.headers)
        bad = [r for r in self.rows if len(r) != width]
        if bad:  # a ragged table is a bug in a builder here, not in the data
            raise ValueError(f"table row of {len(bad[0])} cells under {width} headers: {bad[0]}")


@dataclass(frozen=True)
class Image:
    path: str        # relative to the report folder, POSIX separators
    caption: str

    def __post_init__(self) -> None:
        # Both pages link this path: a scheme (javascript:, data:) or an absolute path here
        # would be a bug in a section builder, never something the data may ask for.
        if ":" in self.path or self.path.startswith("/") or ".." in self.path.split("/"):
            raise ValueError(f"figure path {self.path!r} must be relative, inside the report")


@dataclass(frozen=True)
class Fold:
    """Long content a reader opens on demand (<details>)."""
    summary: str
    blocks: tuple[Block, ...]


Block = Text | Table | Image | Fold


@dataclass(frozen=True)
class Section:
    title: str
    anchor: str
    blocks: tuple[Block, ...] = ()


@dataclass(frozen=True)
class Document:
    title: str
    intro: tuple[Block, ...]
    sections: tuple[Section, ...] = field(default_factory=tuple)


def images(blocks: tuple[Block, ...]) -> list[Image]:
    """Every image, folds included, in reading order."""
    found: list[Image] = []
    for block in blocks:
        if isinstance(block, Image):
            found.append(block)
        elif isinstance(block, Fold):
            found.extend(images(block.blocks))
    return found
