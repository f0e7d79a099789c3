"""The report as one HTML page: inline CSS, no external script, style or font, nothing fetched.

A few lines of inline script record, on <body data-render-check=...>, whether every image decoded
and whether any script error happened; the browser test reads it back from the dumped DOM.
"""
from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from harness.report.document import Block, Document, Fold, Image, Section, Table, Text

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f;
       margin: 0 auto; padding: 1.2em 1.5em 4em; max-width: 1500px; }
h1 { font-size: 1.7em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
nav ol { columns: 2; font-size: .95em; }
h3 { font-size: 1.05em; margin: 1.4em 0 .3em; }
div.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: .4em 0 .8em; font-size: 12px; }
th, td { border: 1px solid #d8d8d8; padding: 2px 5px; text-align: left; vertical-align: top; }
th { font-weight: 600; }
th { background: #f1f3f5; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfc; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; }
details { margin: .6em 0; } summary { cursor: pointer; font-weight: 600; color: #0b5cad; }
p.note { color: #333; max-width: 75em; }
"""

# Records image decoding and script errors for the browser test; harmless for readers.
CHECK_SCRIPT = """
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  var failed = bad.length || window.__errors.length;
  document.body.setAttribute('data-render-check', (failed ? 'FAIL' : 'OK') + ' images='
    + imgs.length + ' broken=' + bad.length + ' errors=' + window.__errors.length);
});
"""


def render(doc: Document, out_dir: Path, embed_images: bool) -> str:
    toc = "".join(f'<li><a href="#{s.anchor}">{escape(s.title)}</a></li>' for s in doc.sections)
    body = "".join(_section(s, out_dir, embed_images) for s in doc.sections)
    intro = "".join(_block(b, out_dir, embed_images) for b in doc.intro)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(doc.title)}</title><style>{STYLE}</style>"
            f"<script>{CHECK_SCRIPT}</script></head>\n<body>\n<h1>{escape(doc.title)}</h1>\n"
            f"{intro}<nav><ol>{toc}</ol></nav>\n{body}</body></html>\n")


def _section(section: Section, out_dir: Path, embed: bool) -> str:
    inner = "".join(_block(b, out_dir, embed) for b in section.blocks)
    return f'<section id="{section.anchor}"><h2>{escape(section.title)}</h2>\n{inner}</section>\n'


def _block(block: Block, out_dir: Path, embed: bool) -> str:
    if isinstance(block, Text):
        return f'<p class="note">{escape(block.text)}</p>\n'
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Image):
        return _image(block, out_dir, embed)
    if isinstance(block, Fold):
        inner = "".join(_block(b, out_dir, embed) for b in block.blocks)
        return f"<details><summary>{escape(block.summary)}</summary>\n{inner}</details>\n"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _table(table: Table) -> str:
    numeric = table.numeric or (False,) * len(table.headers)
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    rows = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(c)}</td>' if n else f"<td>{escape(c)}</td>"
                         for c, n in zip(row, numeric)) + "</tr>\n"
        for row in table.rows)
    title = f"<h3>{escape(table.title)}</h3>\n" if table.title else ""
    return (f'{title}<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>\n{rows}'
            f"</tbody></table></div>\n")


def _image(image: Image, out_dir: Path, embed: bool) -> str:
    src = image.path
    if embed:  # one file that can be mailed or attached, at the price of ~1.35x the PNG bytes
        data = base64.b64encode((out_dir / image.path).read_bytes()).decode("ascii")
        src = f"data:image/png;base64,{data}"
    return (f'<figure><img src="{escape(src)}" alt="{escape(image.caption)}">'
            f"<figcaption>{escape(image.caption)}</figcaption></figure>\n")
