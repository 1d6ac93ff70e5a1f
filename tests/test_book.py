"""The book as `make book` builds it and as a reader meets it.

One jupyter-book build per test session (every chapter executed, warnings are errors) feeds two kinds
of check: the build itself (marker `book`) and a real browser (marker `browser`): every page opened in
headless Chromium through Playwright with every request outside 127.0.0.1 blocked.

Set PE_BOOK_HTML=book/_build/html to check an existing build (for example `make book`'s) instead of
building. The browser checks need Debian's `chromium` package and Playwright (`pip install playwright`,
which must not download a browser of its own: it drives /usr/bin/chromium); without them they skip
and say so.
"""
from __future__ import annotations

import base64
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from pelib import evidence

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"


def _chapters():
    toc = yaml.safe_load((BOOK / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


CHAPTERS = _chapters()
PAGES = [f"{c}.html" for c in CHAPTERS]


def test_toc_lists_existing_chapters():
    for f in CHAPTERS:
        assert (BOOK / f"{f}.md").exists(), f"_toc.yml names {f}, which does not exist"


def test_config_fails_on_errors_and_needs_no_network():
    cfg = yaml.safe_load((BOOK / "_config.yml").read_text())
    assert cfg["execute"]["execute_notebooks"] == "force"
    assert cfg["execute"]["raise_on_error"] is True
    assert cfg["execute"]["timeout"] >= 300
    sc = cfg["sphinx"]["config"]
    assert sc["intersphinx_mapping"] == {}
    assert not re.match(r"^(https?:)?//", sc["mathjax_path"]), "MathJax must come from _static"
    assert (BOOK / "_vendor" / sc["mathjax_path"]).is_file()
    assert sc["nb_ipywidgets_js"] == {}, "the widget manager and require.js would come from a CDN"


# ---- every number in context: a sentence with a time, rate or percentage names its evidence kind ------

# a number with a unit of time, rate or share (µs, ms, cycles, TB/s, TFLOPS, GHz, %, a 1.15x ratio)
NUM_UNIT = re.compile(r"(?<![\w.])[-+−~]?\d[\d,]*(?:\.\d+)?(?:\s?%|\s?(?:µs|us|ms|ns|s|GB/s|TB/s|PFLOPS|TFLOP/s|TFLOPS|"
                      r"GFLOP/s|cycles?|GHz|MHz|W)\b|[x×](?![\w\d])(?!\s*\d))")
# the kind words (pelib.evidence.KINDS) and their forms: measured / measures, records, predicts, the model's
KIND_WORD = re.compile(r"\b(?:measur|record|predict|simulat|compil|modell?|emulat)\w*", re.I)
# sentences whose number is a definition or a published figure, not a result: a small allow-list
UNIT_DEFINITIONS = re.compile(r"PTX ISA|datasheet|published|by definition|speed[- ]of[- ]light", re.I)
# chapters held off this check, each with its reason (none now: every chapter names the kind of each number)
NUMBERS_EXEMPT: dict = {}


def prose_sentences(text: str) -> list[str]:
    """The sentences of prose text: maths and inline code replaced by a token, a list item its own paragraph."""
    text = re.sub(r"\$[^$]*\$", "M", text)
    text = re.sub(r"`[^`]*`", "C", text)
    out = []
    for para in re.split(r"\n\s*\n|\n(?=\s*(?:[-*+•]|\d+\.)\s)", text):
        para = " ".join(para.split())
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(*\[])", para) if s]
    return out


def unlabelled_numbers(text: str) -> list[str]:
    """The sentences with a time, rate or percentage and no evidence-kind word in the sentence."""
    return [s for s in prose_sentences(text)
            if NUM_UNIT.search(s) and not KIND_WORD.search(s) and not UNIT_DEFINITIONS.search(s)]


def _markdown_prose(md: str) -> str:
    """A MyST chapter's prose: code cells, front matter, tables, directives and raw HTML lines left out."""
    out, fence = [], False
    for ln in md.split("\n"):
        if ln.startswith("```"):
            fence = not fence
            continue
        if fence or ln.startswith(("---", "|", ":", "<")):
            continue
        out.append(ln)
    return "\n".join(out)


def test_number_check_catches_a_bare_number():
    assert unlabelled_numbers("The tile takes 510 cycles. It is fast.") == ["The tile takes 510 cycles."]
    assert not unlabelled_numbers("The tile takes 510 cycles (recorded, F24).")
    assert not unlabelled_numbers("A 224 x 224 image has 196 patches of 768 values.")
    assert unlabelled_numbers("- 07a, 0.775 ms, 1.155x cuBLAS.\n- 06 leads.") == ["- 07a, 0.775 ms, 1.155x cuBLAS."]


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS])
def test_every_number_in_the_prose_names_its_kind(chapter):
    """Each prose sentence of a chapter's source with a time, rate or percentage names its evidence kind
    in the sentence itself (a section heading does not carry into it); the browser check below does the
    same for what the page's cells print."""
    if chapter in NUMBERS_EXEMPT:
        pytest.skip(NUMBERS_EXEMPT[chapter])
    bad = unlabelled_numbers(_markdown_prose((BOOK / f"{chapter}.md").read_text()))
    assert not bad, f"{chapter}: sentences with a number and no evidence kind:\n  " + "\n  ".join(s[:160] for s in bad)


# ---- the one build ----------------------------------------------------------------------------------

@dataclass
class Built:
    html: Path
    log: str = ""
    seconds: float = 0.0
    rc: int = 0


def _build(out: Path) -> Built:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src")] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(BOOK),
           "--all", "-W", "--keep-going", "--path-output", str(out)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    log = p.stdout + p.stderr
    (out / "build.log").write_text(log)     # each chapter's execution time is in it ("Executed notebook in")
    return Built(out / "_build" / "html", log, time.monotonic() - t0, p.returncode)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> Built:
    """The book's HTML: PE_BOOK_HTML if set, else one build of the whole book into a temporary folder."""
    given = os.environ.get("PE_BOOK_HTML")
    if given:
        html = Path(given).resolve()
        if not (html / "index.html").is_file():
            pytest.fail(f"PE_BOOK_HTML={given} holds no built book (no index.html); run `make book` first")
        return Built(html)
    pytest.importorskip("jupyter_book", reason="the book build needs the book extra: pip install -e '.[book]'")
    b = _build(tmp_path_factory.mktemp("book"))
    sys.stderr.write(f"\n[book] built in {b.seconds:.0f} s (rc {b.rc}) into {b.html}\n")
    return b


@pytest.mark.book
def test_book_builds_and_executes_every_chapter(built):
    """`make book`'s build: every chapter executed without error, no warning (-W)."""
    lines = built.log.splitlines()
    problems = [ln for ln in lines if re.search(r"WARNING|ERROR|Error|Traceback", ln) and "TCP without" not in ln]
    tail = "\n".join(problems[:40] + ["..."] + lines[-25:])
    assert built.rc == 0, f"the book build failed (rc {built.rc}):\n{tail}"
    for page in PAGES:
        assert (built.html / page).is_file(), f"no page {page} in the build"


@pytest.mark.book
@pytest.mark.parametrize("page", PAGES)
def test_no_error_output_on_page(built, page):
    text = (built.html / page).read_text()
    for marker in ("Traceback (most recent call last)", 'class="output traceback', "output_type\": \"error"):
        assert marker not in text, f"{page} shows an error output ({marker!r})"


@pytest.mark.book
def test_downloads_and_sources(built):
    for c in CHAPTERS:
        if c.startswith("chapters/"):
            nb = built.html / "_sources" / f"{c}.ipynb"
            assert nb.is_file(), f"no .ipynb download for {c}"
            assert '"cells"' in nb.read_text()
    assert (built.html / "src" / "kernels" / "fp8" / "06_stages.cu").is_file()
    assert list((built.html / "_downloads").glob("pe-blackwell-*.tar.gz")), "no source archive"


# ---- the browser --------------------------------------------------------------------------------------

CHROMIUM = os.environ.get("PE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _need_browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"the browser suite needs Chromium at {CHROMIUM}: install Debian's package "
                    "(apt-get install chromium) or set PE_CHROMIUM")
    return pytest.importorskip("playwright.sync_api",
                               reason="the browser suite needs Playwright: pip install playwright "
                                      "(the test extra); it drives Debian's chromium, no download")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(built):
    """The built book served on 127.0.0.1 (an ephemeral port), as a reader's browser would get it."""
    if not (built.html / "index.html").is_file():
        pytest.fail("no built book to serve (see test_book_builds_and_executes_every_chapter)")
    handler = functools.partial(_Quiet, directory=str(built.html))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def browser_context():
    """Headless Chromium (Debian's) with a fresh profile; every request off 127.0.0.1 is refused."""
    pw = _need_browser()
    with pw.sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                   headless=True, viewport={"width": 1280, "height": 900})
        ctx.external = []

        def route(r):
            if r.request.url.startswith(("http://127.0.0.1:", "data:", "blob:")):
                r.continue_()
            else:
                ctx.external.append(r.request.url)
                r.abort()

        ctx.route("**/*", route)
        yield ctx
        ctx.close()


# What one visit of a page records (in the page, after MathJax has finished).
_PAGE_FACTS_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const art = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const cs = getComputedStyle(art);
  const col = art.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const facts = {column: col, rawMath: [], untypeset: 0, mathCount: 0, wide: [], tables: [], images: [],
                 sweeps: [], widgetDebris: []};
  // maths: every .math element typeset, no raw \( or \[ left in the page's text outside code
  for (const m of art.querySelectorAll('.math')) {
    facts.mathCount++;
    if (!m.querySelector('mjx-container')) { facts.untypeset++; }
  }
  const walker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const n = walker.currentNode;
    if (n.parentElement.closest('pre, code, script, style, textarea, .highlight')) continue;
    const t = n.textContent;
    const i = t.search(/\\\(|\\\[/);
    if (i >= 0) facts.rawMath.push(t.slice(Math.max(0, i - 30), i + 40));
  }
  // wide things: a table or image wider than the column must sit in a scroll container no wider than it
  function scrolls(el) {
    for (let a = el.parentElement; a && a !== art.parentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && a.getBoundingClientRect().width <= col + 1) return true;
    }
    return false;
  }
  for (const el of art.querySelectorAll('table, img, .pe-sweep, div.cell_output > div')) {
    const w = el.getBoundingClientRect().width;
    if (w > col + 1 && !scrolls(el)) {
      facts.wide.push(`${el.tagName.toLowerCase()}.${el.className} ${Math.round(w)}px > ${Math.round(col)}px`);
    }
  }
  // result tables (pelib.facts.Table): caption text, cells
  for (const t of art.querySelectorAll('.pe-table')) {
    const cap = t.querySelector('.pe-table-caption');
    const capRect = cap ? cap.getBoundingClientRect() : null;
    const shown = t.offsetParent !== null;   // a table in a hidden sweep panel has no layout
    facts.tables.push({caption: cap ? cap.textContent : '', shown: shown,
                       descriptive: t.classList.contains('pe-descriptive'),
                       numericCells: t.querySelectorAll('td.pe-num').length,
                       captionVisible: !shown || (!!capRect && capRect.width > 0
                                                  && capRect.right <= art.getBoundingClientRect().right + 1),
                       cells: Array.from(t.querySelectorAll('td')).map(td => td.innerText),
                       emptyColumns: (() => {
                         // textContent: a table in a closed fold has no rendered text, yet its cells are there
                         const heads = Array.from(t.querySelectorAll('thead th')).map(h => h.textContent.trim());
                         const rows = Array.from(t.querySelectorAll('tbody tr')).filter(r => r.querySelector('td'));
                         return heads.filter((h, i) => rows.length && rows.every(r => {
                           const c = r.children[i]; return !c || !c.textContent.trim(); }));
                       })(),
                       width: t.querySelector('table') ? t.querySelector('table').getBoundingClientRect().width
                                                       : t.getBoundingClientRect().width,
                       inSweep: !!t.closest('.pe-sweep-panel')});
  }
  // a code block that scrolls vertically (a keyhole onto the code) rather than running at its full height
  facts.keyholes = [];
  for (const pre of art.querySelectorAll('pre')) {
    if (pre.offsetParent !== null && pre.clientHeight > 0 && pre.scrollHeight > pre.clientHeight + 4) {
      facts.keyholes.push(`${Math.round(pre.clientHeight)}px of ${pre.scrollHeight}px: ` +
                          pre.innerText.slice(0, 60));
    }
  }
  for (const img of art.querySelectorAll('div.cell_output img')) {
    facts.images.push({src: img.currentSrc || img.src, alt: img.alt, width: img.getBoundingClientRect().width,
                       naturalWidth: img.naturalWidth, shown: img.offsetParent !== null,
                       complete: img.complete && img.naturalWidth > 0});
  }
  for (const s of art.querySelectorAll('.pe-sweep')) {
    const vis = () => s.querySelector('.pe-sweep-panel:not([hidden])');
    const rec = {height: s.getBoundingClientRect().height, inputs: 0, moved: []};
    const first = vis();
    rec.panelHeight = first ? first.getBoundingClientRect().height : 0;
    for (const inp of s.querySelectorAll('input.pe-sweep-range')) {
      rec.inputs++;
      const before = vis();
      const start = inp.value;
      inp.value = (+inp.value === +inp.max) ? inp.min : inp.max;
      inp.dispatchEvent(new Event('input'));
      const after = vis();
      rec.moved.push(!!after && after !== before && after.innerHTML !== before.innerHTML
                     && after.getBoundingClientRect().height > 0);
      inp.value = start; inp.dispatchEvent(new Event('input'));
    }
    facts.sweeps.push(rec);
  }
  for (const el of art.querySelectorAll('.jupyter-widgets, .widget-area, script[type*="jupyter-widget"]')) {
    facts.widgetDebris.push(el.className || el.type);
  }
  // the reader's measures: words, height, where the first figure or diagram starts, diagrams, exercises
  const visible = (el) => el.offsetParent !== null && el.getBoundingClientRect().height > 0;
  const words = (t) => (t.match(/\S+/g) || []).length;
  let listingWords = 0;
  for (const l of art.querySelectorAll('.pe-listing')) { if (visible(l)) listingWords += words(l.innerText); }
  const tops = [];
  for (const el of art.querySelectorAll('div.cell_output img, figure.pe-diagram, article figure img')) {
    const r = el.getBoundingClientRect();
    if (visible(el) && r.width > 60 && r.height > 40) tops.push(r.top + window.scrollY);
  }
  facts.metrics = {words: words(art.innerText), wordsOutsideListings: words(art.innerText) - listingWords,
                   height: document.documentElement.scrollHeight,
                   firstFigure: tops.length ? Math.round(Math.min(...tops)) : null,
                   figures: art.querySelectorAll('div.cell_output img').length,
                   diagrams: art.querySelectorAll('figure.pe-diagram').length,
                   exercises: art.querySelectorAll('.pe-exercise').length};
  facts.diagrams = [];
  for (const f of art.querySelectorAll('figure.pe-diagram')) {
    const svg = f.querySelector('svg');
    const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const vb = svg && svg.viewBox && svg.viewBox.baseVal ? svg.viewBox.baseVal.width : 0;
    const sizes = svg ? Array.from(svg.querySelectorAll('text')).filter(t => t.textContent.trim())
                          .map(t => parseFloat(t.getAttribute('font-size') || getComputedStyle(t).fontSize)) : [];
    facts.diagrams.push({kind: f.dataset.kind, stage: f.dataset.stage, width: r.width, height: r.height,
                         texts: sizes.length, minTextPx: sizes.length && vb ? Math.min(...sizes) * r.width / vb : 0,
                         caption: (f.querySelector('figcaption') || {}).textContent || ''});
  }
  // folds: every <details> (a folded cell output is one too), with its label; words with every fold open
  const generic = /^\s*(show|hide) code cell (output|source|content|input)s?\s*$|^\s*click to (show|expand)\s*$/i;
  facts.folds = Array.from(art.querySelectorAll('details')).map(d => {
    const s = d.querySelector('summary');
    const label = s ? (s.querySelector('.collapsed') || s).innerText.trim() : '';
    return {label: label, generic: !label || generic.test(label)};
  });
  const closed = Array.from(art.querySelectorAll('details:not([open])'));
  closed.forEach(d => d.open = true);
  let openListing = 0;
  for (const l of art.querySelectorAll('.pe-listing')) { if (visible(l)) openListing += words(l.innerText); }
  facts.metrics.wordsFoldsOpen = words(art.innerText) - openListing;
  facts.openParagraphs = Array.from(art.querySelectorAll('p, li')).filter(el =>
      !el.closest('pre, table, .pe-table, .pe-stage-header, figure, .highlight, .pe-banner, .pe-exercise-where')
      && !(el.tagName === 'P' && el.closest('li'))).map(el => el.innerText);
  closed.forEach(d => d.open = false);
  facts.metrics.folds = facts.folds.length;
  // tables wider than the column (a scroll wrapper hides their right-hand columns)
  facts.wideTables = facts.tables.filter(t => t.shown && t.width > col + 1)
                                 .map(t => `${Math.round(t.width)}px: ${t.caption.slice(0, 70)}`);
  const banner = art.querySelector('.pe-banner');
  const bs = banner ? getComputedStyle(banner) : null;
  facts.bannerLines = banner ? Math.round((banner.clientHeight - parseFloat(bs.paddingTop) - parseFloat(bs.paddingBottom)) /
                                          (parseFloat(bs.lineHeight) || 20)) : 0;
  facts.stderr = Array.from(art.querySelectorAll('.output.stderr, .stderr')).map(e => e.innerText.slice(0, 300));
  // the figures each cell output shows (a cell that returns a figure it has already drawn shows it twice)
  facts.cellImages = Array.from(art.querySelectorAll('div.cell_output')).map(o => Array.from(o.querySelectorAll('img'))
    .filter(visible).map(i => i.currentSrc || i.src)).filter(a => a.length > 1);
  facts.outputs = Array.from(art.querySelectorAll('div.cell_output')).map(e => e.innerText).join('\n');
  facts.sourceLinks = Array.from(art.querySelectorAll('a.pe-src')).map(a => a.getAttribute('href'));
  facts.text = art.innerText;
  const text = art.innerText;
  // a widget shown only by its plain-text stand-in has no offline view: nothing to move in the book
  for (const w of ['VBox(children', 'Loading widget', 'HBox(children', 'IntSlider(', 'in a live Jupyter kernel']) {
    if (text.includes(w)) facts.widgetDebris.push(w);
  }
  return facts;
}
"""


@dataclass
class Visit:  # noqa: D101
    page: str
    facts: dict = field(repr=False)
    console_errors: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    external: list = field(default_factory=list)


@pytest.fixture(scope="module")
def visits(server, browser_context, built):
    """Every page of the book visited once; what each visit saw."""
    out = {}
    ctx = browser_context
    for page in PAGES:
        pg = ctx.new_page()
        v = Visit(page, {})
        pg.on("console", lambda m, v=v: v.console_errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e, v=v: v.console_errors.append(f"uncaught: {e}"))
        pg.on("requestfailed", lambda r, v=v: v.failed.append(f"{r.url} ({r.failure})"))
        pg.on("response", lambda r, v=v: v.failed.append(f"{r.url} ({r.status})") if r.status >= 400 else None)
        n0 = len(ctx.external)
        pg.goto(server + page, wait_until="load")
        v.facts = pg.evaluate(_PAGE_FACTS_JS)
        pg.wait_for_timeout(100)
        v.external = ctx.external[n0:]
        v.failed = [f for f in v.failed if f.startswith(server)]
        out[page] = v
        pg.close()
    return out


def _png_text(data: bytes) -> str:
    """The text chunks of a PNG (pelib writes a figure's drawn text into 'Description'; matplotlib
    writes text outside Latin-1 as iTXt)."""
    import zlib

    out, i = [], 8
    while i + 8 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        if kind == b"tEXt":
            out.append(body.split(b"\0", 1)[-1].decode("latin-1"))
        elif kind == b"zTXt":
            out.append(zlib.decompress(body.split(b"\0", 1)[-1][1:]).decode("latin-1"))
        elif kind == b"iTXt":
            _key, rest = body.split(b"\0", 1)
            compressed, rest = rest[0], rest[2:]
            _lang, _tkey, text = rest.split(b"\0", 2)
            out.append((zlib.decompress(text) if compressed else text).decode("utf-8"))
        i += 12 + n
    return " ".join(out)


def _image_bytes(src: str, server: str, html: Path) -> bytes:
    if src.startswith("data:"):
        return base64.b64decode(src.split(",", 1)[1])
    assert src.startswith(server), src
    return (html / src[len(server):].split("?")[0]).read_bytes()


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_page_offline(visits, page):
    """No request leaves the book; no console error; no local request fails."""
    v = visits[page]
    assert not v.external, f"{page} asked the network for {v.external}"
    assert not v.failed, f"{page}: failed requests {v.failed}"
    assert not v.console_errors, f"{page}: console errors {v.console_errors}"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_math_typeset(visits, page):
    f = visits[page].facts
    assert f["untypeset"] == 0, f"{page}: {f['untypeset']} of {f['mathCount']} math elements not typeset"
    assert not f["rawMath"], f"{page}: raw TeX in the text: {f['rawMath'][:5]}"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_nothing_wider_than_the_column(visits, page):
    f = visits[page].facts
    assert not f["wide"], f"{page}: wider than the {f['column']:.0f}px column with no scroll: {f['wide'][:6]}"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_widgets_work_offline(visits, page):
    """Each sweep shows a panel, and every one of its sliders switches to another precomputed panel."""
    f = visits[page].facts
    assert not f["widgetDebris"], f"{page}: widget remnants that need a kernel: {f['widgetDebris']}"
    for i, s in enumerate(f["sweeps"]):
        assert s["height"] > 40 and s["panelHeight"] > 20, f"{page}: sweep {i} is blank ({s})"
        assert s["inputs"] >= 1 and all(s["moved"]), f"{page}: sweep {i}'s slider does not change the view ({s})"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_evidence_labels(visits, page, server, built):
    """Every result table's caption and every figure's drawn text name an evidence kind; the caption
    stays in view however wide the table."""
    f = visits[page].facts
    bad = []
    for t in f["tables"]:
        if t["descriptive"]:   # prose in table form (names, ideas): it may carry no number
            if t["numericCells"]:
                bad.append(f"a descriptive table shows numbers: {t['caption'][:90]!r}")
            continue
        if not evidence.kinds_in(t["caption"]):
            bad.append(f"table without an evidence kind: {t['caption'][:90]!r} {t['cells'][:4]}")
        elif not t["captionVisible"]:
            bad.append(f"caption cut off: {t['caption'][:90]!r}")
    for im in f["images"]:
        assert im["complete"], f"{page}: broken image {im['src'][:80]}"
        text = _png_text(_image_bytes(im["src"], server, built.html))
        if not evidence.kinds_in(text):
            bad.append(f"figure without an evidence kind: {im['alt'][:80]!r} {text[:120]!r}")
    assert not bad, f"{page}:\n  " + "\n  ".join(bad)


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_no_error_row_shown_as_a_result(visits, page):
    """A measured table shows results only: a run that FAILED or raised is not a result (the table's
    code lists such runs apart, as not measured). Recorded tables may quote a failed attempt's error."""
    for t in visits[page].facts["tables"]:
        if "measured" not in evidence.kinds_in(t["caption"]):
            continue
        rows = [c for c in t["cells"] if re.search(r"\bFAILED\b|Error\b|Traceback", c)]
        assert not rows, f"{page}: {t['caption'][:80]!r} shows error cells as results: {rows[:3]}"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_no_table_has_an_empty_column(visits, page):
    """A rendered table whose column is blank in every row says nothing there (the NVFP4 recorded table
    once looked its values up under the depth None)."""
    bad = [f"{t['caption'][:80]!r}: {t['emptyColumns']}" for t in visits[page].facts["tables"] if t["emptyColumns"]]
    assert not bad, f"{page}: tables with an empty column:\n  " + "\n  ".join(bad)


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_code_runs_at_full_height(visits, page):
    """No listing is a vertical scroll box: the reader sees the code, not a keyhole onto it."""
    f = visits[page].facts
    assert not f["keyholes"], f"{page}: code in a vertical scroll box: {f['keyholes'][:4]}"


@pytest.mark.browser
def test_search_finds_tcgen05(server, browser_context):
    """The search page finds tcgen05, ranks pages by how much they use it (scores never rise down the
    list; not the title order), and takes its snippets from prose, not diffs or code."""
    pg = browser_context.new_page()
    pg.goto(server + "search.html?q=tcgen05", wait_until="load")
    pg.wait_for_function("document.querySelectorAll('#search-results ul.search li').length > 0", timeout=30000)
    pg.wait_for_function("Array.from(document.querySelectorAll('#search-results ul.search li'))"
                         ".every(li => li.querySelector('p.context'))", timeout=30000)
    hits = pg.eval_on_selector_all("#search-results ul.search li a",
                                   "els => els.map(e => [e.textContent, parseFloat(e.dataset.score)])")
    snippets = pg.eval_on_selector_all("#search-results ul.search li p.context", "els => els.map(e => e.textContent)")
    pg.close()
    assert len(hits) >= 3, hits
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True), f"results not ordered by score: {hits}"
    titles = [t for t, _ in hits]
    assert titles != sorted(titles), f"results in title order: {titles}"
    for sn in snippets:
        assert not re.search(r"(^|\s)(@@|\+\+\+|---\s)|\n[+-]", sn), f"diff debris in a snippet: {sn[:160]!r}"


@pytest.mark.browser
def test_pages_are_in_the_toc_order_and_link_the_repository(visits, server, browser_context):
    pg = browser_context.new_page()
    pg.goto(server + PAGES[0], wait_until="load")
    assert pg.locator(".repository-button, a[href*='pe-blackwell-']").count() >= 1
    dl = pg.eval_on_selector_all(".dropdown-download-buttons a", "els => els.map(e => e.getAttribute('href'))")
    pg.close()
    assert any(h and h.endswith(".ipynb") for h in dl), dl


# ---- the book as a book: measures, diagrams, exercises, legible figures, clean outputs ----------------

# The targets (issue "The book as a book"): words per page (the prose, code and outputs a reader sees,
# folded blocks and the one whole-kernel listing left out), and where the first figure or diagram starts.
WORDS_MAX = 3000
FIRST_FIGURE_MAX_PX = 1500
MIN_TEXT_PX = 9.0
# Pages held to other limits, each with the reason (the closing note of the issue repeats them).
# Pages rewritten as book pages with more than 3,000 words with folds closed (some folds opened into prose) are
# held instead to the book-page target of 3,500 words with every fold open (test_page_as_a_book_page).
WORDS_EXEMPT = {c: "a book page: held to 3,500 words with every fold open (test_page_as_a_book_page)" for c in (
    "chapters/fp8_persistent", "chapters/fp8_cta_pair", "chapters/nvfp4_single_stage",
    "chapters/fp8_staged_epilogue", "chapters/hopper_substages", "chapters/gonogo_proposals",
    "chapters/how_we_know", "chapters/nvfp4_pipelined", "chapters/nvfp4_beyond_lab", "chapters/hopper_persistent")}
FIRST_FIGURE_EXEMPT = {}
# Chapters that teach a Blackwell stage or idea: each draws at least one diagram and poses an exercise.
BLACKWELL = [c for c in CHAPTERS if c.split("/")[-1].startswith(("nvfp4_", "fp8_", "seeing_", "gonogo_", "tma_store"))
             or c.endswith("how_we_know")]
HOPPER = [c for c in CHAPTERS if c.split("/")[-1].startswith("hopper_")]


def metrics_table(visits) -> list[dict]:
    rows = []
    for page in PAGES:
        m = dict(visits[page].facts["metrics"])
        rows.append({"page": page.removeprefix("chapters/").removesuffix(".html"), **m})
    return rows


@pytest.mark.browser
def test_page_metrics(visits):
    """Per page: words, height, first figure, figures, diagrams, exercises; printed and written as JSON
    (PE_BOOK_METRICS=<file> keeps it)."""
    import json

    rows = metrics_table(visits)
    out = os.environ.get("PE_BOOK_METRICS")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    head = (f"{'page':24} {'words':>6} {'no-list':>7} {'open':>6} {'folds':>5} {'height':>7} {'1st fig':>7} "
            f"{'figs':>4} {'diag':>4} {'ex':>3}")
    lines = [head] + [f"{r['page']:24} {r['words']:6} {r['wordsOutsideListings']:7} {r['wordsFoldsOpen']:6} "
                      f"{r['folds']:5} {r['height']:7} {str(r['firstFigure']):>7} {r['figures']:4} {r['diagrams']:4} "
                      f"{r['exercises']:3}" for r in rows]
    sys.stderr.write("\n[book metrics]\n" + "\n".join(lines) + "\n")
    assert rows and all(r["height"] > 0 for r in rows)


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_page_within_targets(visits, page):
    m = visits[page].facts["metrics"]
    name = page.removesuffix(".html")
    if name not in WORDS_EXEMPT:
        assert m["wordsOutsideListings"] <= WORDS_MAX, f"{page}: {m['wordsOutsideListings']} words (> {WORDS_MAX})"
    if name not in FIRST_FIGURE_EXEMPT:
        assert m["firstFigure"] is not None and m["firstFigure"] <= FIRST_FIGURE_MAX_PX, \
            f"{page}: first figure or diagram at {m['firstFigure']} px (> {FIRST_FIGURE_MAX_PX})"


# A page as a reader meets it (issue "A textbook, not a lab notebook"): at most 3 folds, each labelled with
# what it holds; at most 3,500 words with every fold open (the one whole-kernel listing left out); tables
# within the column; the banner one line; the first figure or diagram in the first screen (900 px).
FOLDS_MAX = 3
WORDS_FOLDS_OPEN_MAX = 3500
FIRST_SCREEN_PX = 900
# Pages not yet rewritten to these targets, each with the reason (none now: every page is held to them); the
# per-page table prints every page's measures.
NOT_YET_A_BOOK_PAGE: dict = {}


def book_page_faults(f: dict) -> list[str]:
    """What keeps a visited page from the book-page targets (empty when it meets them all)."""
    m, bad = f["metrics"], []
    if m["folds"] > FOLDS_MAX:
        bad.append(f"{m['folds']} folds (> {FOLDS_MAX})")
    bad += [f"a fold labelled only {x['label']!r}" for x in f["folds"] if x["generic"]][:3]
    if m["wordsFoldsOpen"] > WORDS_FOLDS_OPEN_MAX:
        bad.append(f"{m['wordsFoldsOpen']} words with the folds open (> {WORDS_FOLDS_OPEN_MAX})")
    bad += [f"a table wider than the column: {w}" for w in f["wideTables"]][:3]
    if f["bannerLines"] > 1:
        bad.append(f"the banner takes {f['bannerLines']} lines")
    if m["firstFigure"] is None or m["firstFigure"] > FIRST_SCREEN_PX:
        bad.append(f"first figure at {m['firstFigure']} px (> {FIRST_SCREEN_PX}, the first screen)")
    return bad


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_page_as_a_book_page(visits, page):
    name = page.removesuffix(".html")
    bad = book_page_faults(visits[page].facts)
    if name in NOT_YET_A_BOOK_PAGE:
        if not bad:
            sys.stderr.write(f"\n[book] {name} meets the book-page targets: take it off NOT_YET_A_BOOK_PAGE\n")
        pytest.skip(f"{NOT_YET_A_BOOK_PAGE[name]}: {'; '.join(bad) or 'meets them now'}")
    assert not bad, f"{page}: " + "; ".join(bad)


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_every_number_on_the_page_names_its_kind(visits, page):
    """The built page's prose, folds open, cell outputs included (what a cell prints as a sentence): each
    sentence with a time, rate or percentage names its evidence kind."""
    name = page.removesuffix(".html")
    if name in NUMBERS_EXEMPT:
        pytest.skip(NUMBERS_EXEMPT[name])
    bad = unlabelled_numbers("\n\n".join(visits[page].facts["openParagraphs"]))
    assert not bad, f"{page}: sentences with a number and no evidence kind:\n  " + "\n  ".join(s[:160] for s in bad)


@pytest.mark.browser
def test_every_chapter_draws_and_asks(visits):
    """A drawn diagram on every Blackwell chapter and on each Hopper chapter, an exercise on every Blackwell
    chapter, and at least three in the Hopper part."""
    bad = []
    for c in BLACKWELL + HOPPER:
        m = visits[f"{c}.html"].facts["metrics"]
        if m["diagrams"] < 1:
            bad.append(f"{c}: no diagram")
        if c in BLACKWELL and m["exercises"] < 1:
            bad.append(f"{c}: no exercise")
    assert HOPPER, "the Hopper part has no chapter"
    n_hopper = sum(visits[f"{c}.html"].facts["metrics"]["exercises"] for c in HOPPER)
    if n_hopper < 3:
        bad.append(f"the Hopper part poses {n_hopper} exercises (< 3)")
    assert not bad, "\n".join(bad)


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_diagrams_render(visits, page):
    """Every drawn diagram is visible, has text, and none of it renders below 9 CSS px; its caption names
    its evidence."""
    for d in visits[page].facts["diagrams"]:
        assert d["width"] > 200 and d["height"] > 60, f"{page}: {d['kind']} of {d['stage']} not visible ({d})"
        assert d["texts"] >= 3, f"{page}: {d['kind']} of {d['stage']} has no text"
        assert d["minTextPx"] >= MIN_TEXT_PX, f"{page}: {d['kind']} text at {d['minTextPx']:.1f} px"
        assert evidence.kinds_in(d["caption"]), f"{page}: {d['kind']} caption names no evidence: {d['caption']!r}"


def _png_meta(data: bytes, key: str) -> str | None:
    m = re.search(re.escape(key).encode() + rb"\x00([0-9.]+)", data)
    return m.group(1).decode() if m else None


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_figure_text_legible(visits, page, server, built):
    """No figure's text renders below 9 CSS px at the width the page shows it (pelib writes each figure's
    smallest text size at 1x into its PNG; a figure shown narrower than drawn shrinks it)."""
    bad = []
    for im in visits[page].facts["images"]:
        if not im["shown"] or not im["naturalWidth"]:
            continue
        data = _image_bytes(im["src"], server, built.html)
        px = _png_meta(data, "pe:min-text-px")
        if px is None:
            bad.append(f"no text-size record: {im['alt'][:60]!r}")
            continue
        shown = float(px) * im["width"] / (im["naturalWidth"] / 2)
        if shown < MIN_TEXT_PX:
            bad.append(f"{shown:.1f} px: {im['alt'][:80]!r}")
    assert not bad, f"{page}:\n  " + "\n  ".join(bad)


_ABS_PATH = re.compile(r"(?<![\w.:/])/(?:home|work|tmp|root|usr|opt|var|private)/[\w.+-]+/")
_RAW_CELL = re.compile(r"^(True|False|None|nan|\{'.*|\[\{.*)$")


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_outputs_clean(visits, page):
    """No warning, stderr or absolute path of the build machine in any output; no raw Python (True, False,
    None, a dict) in a result table's cell, and no cell longer than a short paragraph."""
    f = visits[page].facts
    assert not f["stderr"], f"{page}: stderr output: {f['stderr'][:2]}"
    for word in ("UserWarning", "DeprecationWarning", "RuntimeWarning", "Warning:"):
        assert word not in f["outputs"], f"{page}: an output shows {word}"
    m = _ABS_PATH.search(f["outputs"])
    assert not m, f"{page}: an output shows a path of the build machine: {f['outputs'][max(0, m.start() - 60):m.end() + 40]!r}"
    for t in f["tables"]:
        for c in t["cells"]:
            assert not _RAW_CELL.match(c.strip()), f"{page}: raw Python in a table cell: {c[:80]!r} ({t['caption'][:60]!r})"
            assert len(c) <= 400, f"{page}: a table cell of {len(c)} characters: {c[:100]!r}"


@pytest.mark.browser
@pytest.mark.parametrize("page", PAGES)
def test_no_figure_shown_twice(visits, page, server, built):
    """A cell shows each figure once (a figure function's cell ends with ';', or the notebook draws the
    returned figure a second time)."""
    import hashlib

    for srcs in visits[page].facts["cellImages"]:
        digests = [hashlib.sha1(_image_bytes(s, server, built.html)).hexdigest() for s in srcs]
        assert len(set(digests)) == len(digests), f"{page}: one cell shows the same figure twice ({srcs[0][:80]})"


@pytest.mark.browser
def test_stage_sources_open_as_pages(visits, server, browser_context):
    """A stage header's link opens the source as a highlighted HTML page (not a download)."""
    links = [(p, h) for p in PAGES for h in visits[p].facts["sourceLinks"]]
    assert links, "no page links a stage source"
    pg = browser_context.new_page()
    for page, href in links[:3] + links[-2:]:
        assert href.endswith(".html"), f"{page} links {href}, not its HTML page"
        resp = pg.goto(server + "chapters/" + href, wait_until="load")
        assert resp.ok and "text/html" in resp.headers.get("content-type", ""), (href, resp.headers)
        assert pg.locator("pre").count() == 1 and "__global__" in pg.locator("pre").inner_text()
        assert pg.locator("#L1").count() == 1
    pg.close()


@pytest.mark.browser
def test_reported_defects_stay_fixed(visits):
    """The preface places the problem where its own roofline and floors put it (computed by pelib.sol);
    How we know calls the emulator's evidence emulated; no page plants a mistake through the old mistake
    panel whose figure warned (the exercises do it now)."""
    pre = visits[PAGES[0]].facts
    assert "near the ridge" in pre["outputs"] and "far left" not in pre["outputs"]
    how = next(v for p, v in visits.items() if "how_we_know" in p).facts
    assert "All numbers above are emulated" in how["text"] and "All numbers above are modelled" not in how["text"]
    for page, v in visits.items():
        assert "A planted mistake in" not in v.facts["outputs"], f"{page} still shows an old mistake panel"


@pytest.mark.browser
def test_landing_pages_say_where_the_code_is(visits):
    for page in (PAGES[0], next(p for p in PAGES if "first_hour" in p)):
        text = visits[page].facts["outputs"]
        assert "pe-blackwell-" in text or "git clone http" in text, f"{page} does not say where to get the code"


# Screenshots of three pages as a reader sees them (PE_SCREENSHOTS=<folder> to write them; the committed
# ones are book/_static/screenshots/). Each is scrolled to the thing it shows.
SCREENSHOTS = [("chapters/preface.html", "figure.pe-diagram", "preface.png"),
               ("chapters/fp8_warp_specialized.html", ".pe-exercise", "fp8_warp_specialized_exercise.png"),
               ("chapters/fp8_persistent.html", "figure.pe-diagram", "fp8_persistent_schedule.png")]


@pytest.mark.browser
def test_screenshots(server, browser_context):
    out = os.environ.get("PE_SCREENSHOTS")
    if not out:
        pytest.skip("set PE_SCREENSHOTS=<folder> to write screenshots of three pages")
    from PIL import Image

    Path(out).mkdir(parents=True, exist_ok=True)
    pg = browser_context.new_page()
    pg.set_viewport_size({"width": 1200, "height": 820})
    for page, selector, name in SCREENSHOTS:
        pg.goto(server + page, wait_until="load")
        pg.evaluate("async () => { if (window.MathJax && MathJax.startup) await MathJax.startup.promise; }")
        pg.locator(selector).first.scroll_into_view_if_needed()
        pg.evaluate("window.scrollBy(0, -90)")
        path = Path(out) / name
        pg.screenshot(path=str(path))
        img = Image.open(path).convert("RGB").quantize(colors=96)   # small: a palette PNG
        img.save(path, optimize=True)
    pg.close()
