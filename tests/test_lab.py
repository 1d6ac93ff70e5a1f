"""A chapter in JupyterLab as `make lab` serves it: a double-click opens it as a notebook (through
jupytext and book/lab/overrides.json), it is not marked modified, it runs, and its slider drives its
output. JupyterLab runs on 127.0.0.1 with its settings, checkpoints and runtime files in a temporary
folder, on a copy of the chapter; headless Chromium (Debian's) drives it through Playwright.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTER = "fp8_pipeline_stages.md"
CHROMIUM = os.environ.get("PE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "pe-blackwell-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def lab(tmp_path):
    with running_lab(tmp_path, {CHAPTER: (REPO / "book" / "chapters" / CHAPTER).read_text()}) as served:
        yield served


@contextlib.contextmanager
def running_lab(tmp_path, files: dict):
    """JupyterLab on 127.0.0.1 serving `files` ({name: text}) from a temporary folder: (url, root, tmp_path)."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"the JupyterLab test needs Chromium at {CHROMIUM}: apt-get install chromium")
    pytest.importorskip("jupyterlab", reason="needs JupyterLab (the book extra)")
    pytest.importorskip("jupytext", reason="needs jupytext (the book extra)")
    root = tmp_path / "chapters"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    settings = tmp_path / "app-settings" / "overrides.d"
    settings.mkdir(parents=True)
    shutil.copy(REPO / "book" / "lab" / "overrides.json", settings / "pe-blackwell.json")
    port = _free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src")] + [p for p in [env.get("PYTHONPATH")] if p])
    for k, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                   ("IPYTHONDIR", "ipython")):
        env[k] = str(tmp_path / sub)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
           f"--ServerApp.root_dir={root}", f"--LabApp.app_settings_dir={settings.parent}",
           f"--LabApp.user_settings_dir={tmp_path / 'user-settings'}",
           f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}", "--LabApp.expose_app_in_browser=True",
           f"--config={REPO / 'book' / 'lab' / 'jupyter_server_config.py'}",
           f"--FileCheckpoints.root_dir={tmp_path / 'checkpoints'}", "--LabApp.news_url="]
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(120):
            if proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(url + f"api/status?token={TOKEN}", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not answer in 60 s")
        if proc.poll() is not None:
            pytest.fail("JupyterLab exited:\n" + (tmp_path / "lab.log").read_text()[-3000:])
        yield url, root, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.browser
def test_chapter_opens_as_notebook_and_slider_moves(lab):
    pw = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install playwright")
    url, root, tmp = lab
    original = (root / CHAPTER).read_text()
    with pw.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(str(tmp / "profile"), executable_path=CHROMIUM,
                                                   args=CHROMIUM_ARGS, headless=True,
                                                   viewport={"width": 1400, "height": 1000})
        external = []
        ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url)
                  else (external.append(r.request.url), r.abort()))
        page = ctx.new_page()
        page.goto(url + f"lab?token={TOKEN}", wait_until="domcontentloaded")
        item = page.locator(f".jp-DirListing-item[title*='{CHAPTER}']")
        item.wait_for(timeout=60000)
        item.dblclick()
        # The double-click opened a notebook (the jupytext viewer), not the text editor.
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=60000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                               timeout=60000)
        page.wait_for_timeout(3000)  # kernel info arrives; a chapter that changes its metadata goes dirty now
        state = page.evaluate("""() => { const w = window.jupyterapp.shell.currentWidget;
            return {notebook: w.hasClass('jp-NotebookPanel'), dirty: w.context.model.dirty,
                    path: w.context.path, factory: w.context.factoryName || ''}; }""")
        assert state["notebook"] and state["path"].endswith(CHAPTER), state
        assert not state["dirty"], f"the chapter is marked modified as soon as it opens: {state}"
        # MyST cross-reference markup degrades to readable text in the notebook's Markdown cells.
        md = page.locator(".jp-MarkdownCell .jp-RenderedMarkdown").all_inner_texts()
        joined = "\n".join(md)
        assert "{ref}" not in joined and not any(line.strip().startswith("(") and line.strip().endswith(")=")
                                                   for line in joined.splitlines()), joined[:500]
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        slider = page.locator(".jp-OutputArea .widget-slider .noUi-handle, .jp-OutputArea .widget-hslider .noUi-handle")
        slider.first.wait_for(timeout=240000)
        # JupyterLab renders only the cells in view: after run-all the view is at the last cell, so bring the
        # slider back into view and read the outputs' text content, not what is laid out.
        slider.first.scroll_into_view_if_needed()
        # The slider's output area: the sweep's render of the chosen value (figure, table, SASS delta).
        area = "document.querySelector('.widget-vbox .widget-output')"
        out = page.locator(".widget-vbox .widget-output").first
        try:
            page.wait_for_function(f"(() => {{ const o = {area}; return o && o.textContent.includes('NUM_STAGES='); }})()",
                                   timeout=120000)
        except Exception:   # say what the notebook shows instead of a bare timeout
            page.screenshot(path=str(tmp / "lab.png"), full_page=True)
            shown = page.evaluate("() => Array.from(document.querySelectorAll('.widget-output, "
                                  ".jp-OutputArea-output')).map(e => e.textContent.slice(0, 400))")
            raise AssertionError(f"the slider's output never named NUM_STAGES; outputs: {shown}; "
                                 f"screenshot {tmp / 'lab.png'}, log {tmp / 'lab.log'}") from None
        before = out.text_content()
        slider.first.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"(b) => {{ const o = {area}; return o && o.textContent.includes('NUM_STAGES=')"
                               " && o.textContent !== b; }", arg=before, timeout=60000)
        after = out.text_content()
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        ctx.close()
    assert "NUM_STAGES=4" in before and "NUM_STAGES=5" in after, (before[:300], after[:300])
    assert errors == 0
    assert not external, f"JupyterLab asked the network for {external}"
    assert (root / CHAPTER).read_text() == original, "opening and running the chapter changed its file"
