"""pelib.views.stepper: the states of a simulated run replayed from its events (an mbarrier's phase, pending
arrivals and tx-count; the ring's slots; the accumulators; the warps' waits), its offline view, its live
slider, and the offline view moving in Chromium."""
from __future__ import annotations

import functools
import http.server
import re
import threading
from pathlib import Path

import pytest

from pelib.sim import runs as sim_runs
from pelib.views import stepper as S
from pelib.views.widgets import WidgetError

ROOT = Path(__file__).resolve().parents[1]


def _ev(seq, kind, barrier=None, index=None, phase=None, cta=0, warp=0, lane=0, **kw):
    return {"seq": seq, "cta": cta, "cluster": None, "rank": None, "warp": warp, "lane": lane, "kind": kind,
            "barrier": barrier, "index": index, "phase": phase, "parity": kw.pop("parity", None),
            "bytes": kw.pop("bytes", None), "slot": kw.pop("slot", None), "acc": kw.pop("acc", None),
            "tile": None, "op": None, "role": None, **kw}


def test_phase_completes_on_the_last_arrival_and_zero_tx():
    b = S.Barrier("acc_empty[0]", 0, count=8)
    for n in range(7):
        assert not b.signal(arrivals=1)
    assert (b.phase, b.parity, b.pending) == (0, 0, 1)
    assert b.signal(arrivals=1) and (b.phase, b.parity, b.pending) == (1, 1, 8)
    for n in range(8):
        b.signal(arrivals=1)
    assert (b.phase, b.parity) == (2, 0)
    f = S.Barrier("full[0]", 0, count=1)
    assert not f.signal(arrivals=1, tx=100)          # arrive.expect_tx: the arrival is in, 100 B still owed
    assert not f.signal(tx=-60) and f.tx == 40 and f.phase == 0
    assert f.signal(tx=-40) and (f.phase, f.tx) == (1, 0)
    g = S.Barrier("full[1]", 0, count=1)
    assert not g.signal(tx=-64) and g.tx == -64     # bytes may land before they are announced (tx-count < 0)
    assert g.signal(arrivals=1, tx=64) and g.phase == 1


def test_replay_of_a_small_log():
    ev = [_ev(0, "expect_tx", "full", 0, 0, bytes=96), _ev(1, "wait_begin", "full", 0, 0, warp=1, parity=0),
          _ev(2, "complete_tx", "full", 0, 0, warp=-1, lane=-1, bytes=32),
          _ev(3, "complete_tx", "full", 0, 0, warp=-1, lane=-1, bytes=64),
          _ev(4, "wait_end", "full", 0, 0, warp=1, parity=0), _ev(5, "mma", warp=1, slot=0, acc=0),
          _ev(6, "arrive", "empty", 0, 0, warp=-1, lane=-1), _ev(7, "expect_tx", "full", 0, 1, bytes=96),
          _ev(8, "wait_begin", "empty", 0, 0, parity=0), _ev(9, "wait_end", "empty", 0, 0, parity=0)]
    assert S.arrival_counts(ev) == {(0, "full[0]"): 1, (0, "empty[0]"): 1}
    st = S.replay(ev)
    assert len(st) == len(ev)
    assert st[0].barriers[(0, "full[0]")].tx == 96 and st[0].slots[(0, 0)] == "filling"
    assert st[1].warps[(0, 1)] == "waits on full[0] for parity 0"
    assert st[2].barriers[(0, "full[0]")].tx == 64 and st[2].barriers[(0, "full[0]")].phase == 0
    assert st[3].completed == [(0, "full[0]")] and st[3].barriers[(0, "full[0]")].parity == 1
    assert st[3].slots[(0, 0)].startswith("full")
    assert st[5].slots[(0, 0)] == "read by the MMA" and st[5].accs[(0, 0)].startswith("MMA writing")
    assert st[6].slots[(0, 0)].startswith("empty") and st[6].barriers[(0, "empty[0]")].phase == 1
    assert st[7].barriers[(0, "full[0]")].phase == 1, "a later fill's expect_tx is the next phase's"
    assert st[9].warps[(0, 0)].startswith("passes its wait on empty[0]")
    # without the wait that saw it complete, empty[0]'s count is unknown: the replay never completes it
    st2 = S.replay(ev[:8])
    assert st2[6].barriers[(0, "empty[0]")].count is None and st2[6].barriers[(0, "empty[0]")].phase == 0


@pytest.fixture(scope="module")
def runs():
    ok, why = sim_runs.available()
    if not ok:
        pytest.skip(why)
    return {k: sim_runs.simulate(k, seed=0) for k in ("nvfp4/01_pipelined", "fp8/01_cta2",
                                                       "fp8/09_persistent_megakernel")}


@pytest.mark.parametrize("stage", ["nvfp4/01_pipelined", "fp8/01_cta2", "fp8/09_persistent_megakernel"])
def test_replayed_phases_agree_with_the_simulator(runs, stage):
    """Every signal the simulator logged names the phase it arrived on, every passed wait the phase it saw
    complete: the replay, which knows only the rule, must put each barrier in that phase at that step."""
    r = runs[stage]
    steps = S.steps_of(r.events)
    states = S.replay(r.events)
    checked = 0
    for e, st in zip(steps, states):
        key = (S._bar_cta(e), S._label(e))
        if e["kind"] in ("arrive", "expect_tx", "complete_tx") and e["phase"] is not None:
            before = st.barriers[key].phase - (1 if key in st.completed else 0)
            assert before == e["phase"], f"{stage} step {st.step}: {st.event}: replay phase {before}, run {e['phase']}"
            checked += 1
        elif e["kind"] == "wait_end" and e["phase"] is not None and e["phase"] >= 0:
            assert st.barriers[key].phase >= e["phase"] + 1, f"{stage} step {st.step}: passed an incomplete phase"
            assert e["parity"] == e["phase"] & 1
            checked += 1
    assert checked > 20
    last = states[-1]
    assert all(b.count is not None for b in last.barriers.values()), "a barrier without an arrival count"
    if stage == "fp8/09_persistent_megakernel":   # acc_empty[b]: one arrival per epilogue warp of both CTAs
        ex = S.Stage(stage).exports
        assert last.barriers[(0, "acc_empty[0]")].count == ex.cluster_x * ex.epi_warps
    if stage == "fp8/01_cta2":                    # the peer's slots fill on the leader's full[s]
        assert any(c == 1 for c, _ in last.slots) and all(c == 0 for c, n in last.barriers if n.startswith("full"))


def test_offline_view_is_sampled_and_light(runs):
    st = S.step_through("fp8/09_persistent_megakernel", run=runs["fp8/09_persistent_megakernel"], live=False)
    h = st.offline_html()
    assert h.count('class="pe-sweep-panel"') == st.samples and h.count(" hidden>") == st.samples - 1
    assert 'type="range"' in h and f'max="{st.samples - 1}"' in h and 'class="pe-stepper"' in h
    assert len(h) < 120_000, f"the offline stepper weighs {len(h):,} B"
    assert "simulated" in h and "acc_empty[0]" in h and "cols 256–511" in h    # TMEM columns from the exports
    labels = re.findall(r"step (\d+) of (\d+)</strong>", h)
    assert labels[0] == ("1", str(len(st.states))) and labels[-1][0] == str(len(st.states))
    w = S.step_through("fp8/09_persistent_megakernel", run=runs["fp8/09_persistent_megakernel"], live=False,
                       window=(0, 60), samples=10)
    assert re.findall(r"step (\d+) of", w.offline_html())[-1] == "60"
    with pytest.raises(WidgetError, match="window"):
        S.step_through("fp8/09_persistent_megakernel", run=runs["fp8/09_persistent_megakernel"], live=False,
                       window=(0, 10 ** 6))
    with pytest.raises(WidgetError, match="outside"):
        st.render(len(st.states))
    with pytest.raises(S.StepperError, match="no events"):
        S.steps_of([])


def test_live_slider_drives_the_panel(runs):
    st = S.step_through("nvfp4/01_pipelined", run=runs["nvfp4/01_pipelined"])
    assert st.control is not None and (st.control.min, st.control.max) == (1, len(st.states))
    st.control.value = 8                      # what a reader's drag does: step 8, counted from 1
    assert st.value == 7
    assert "step 4 of" in st.select(3).html and st.control.value == 4
    b = st.mimebundle()
    assert "application/vnd.jupyter.widget-view+json" in b and "text/html" not in b


def test_offline_stepper_moves_in_chromium(runs, tmp_path):
    chromium = Path("/usr/bin/chromium")
    if not chromium.is_file():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    pw = pytest.importorskip("playwright.sync_api")
    st = S.step_through("fp8/01_cta2", run=runs["fp8/01_cta2"], live=False, samples=8)
    js = (ROOT / "book" / "_static" / "pe-sweep.js").read_text()
    (tmp_path / "index.html").write_text(f'<!doctype html><meta charset="utf-8"><body style="width:720px">'
                                         f'{st.offline_html()}<script>{js}</script></body>')
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler,
                                                                             directory=str(tmp_path)))
    srv.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pw.sync_playwright() as p:
            b = p.chromium.launch(executable_path=str(chromium), args=["--no-sandbox", "--headless"])
            page = b.new_page(viewport={"width": 800, "height": 900})
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("http://127.0.0.1") else r.abort())
            page.goto(f"http://127.0.0.1:{srv.server_address[1]}/index.html")
            shown = lambda: page.locator(".pe-sweep-panel:not([hidden])")
            assert shown().count() == 1 and "step 1 of" in shown().inner_text()
            page.locator("input.pe-sweep-range").fill("5")
            page.locator("input.pe-sweep-range").dispatch_event("input")
            assert shown().count() == 1 and shown().get_attribute("data-key") == "5"
            text = shown().inner_text()
            assert "step 1 of" not in text and "mbarrier" in text and "CTA 1" in text
            assert page.locator("output").first.inner_text().startswith("step ")
            assert shown().bounding_box()["width"] <= 760, "the panel is wider than the column"
            b.close()
    finally:
        srv.shutdown()


NOTEBOOK = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Step through

```{code-cell} ipython3
from pelib.views import stepper
stepper.step_through("fp8/09_persistent_megakernel")
```
'''


@pytest.mark.browser
def test_stepper_moves_live_in_jupyterlab(runs, tmp_path):
    """In JupyterLab the stepper is a live slider: its output names the step and changes when it moves."""
    pw = pytest.importorskip("playwright.sync_api", reason="needs Playwright: pip install playwright")
    from test_lab import CHROMIUM, CHROMIUM_ARGS, TOKEN, running_lab

    with running_lab(tmp_path, {"step.md": NOTEBOOK}) as (url, root, tmp):
        with pw.sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(str(tmp / "profile"), executable_path=CHROMIUM,
                                                       args=CHROMIUM_ARGS, headless=True,
                                                       viewport={"width": 1400, "height": 1000})
            external = []
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url)
                      else (external.append(r.request.url), r.abort()))
            page = ctx.new_page()
            page.goto(url + f"lab?token={TOKEN}", wait_until="domcontentloaded")
            item = page.locator(".jp-DirListing-item[title*='step.md']")
            item.wait_for(timeout=60000)
            item.dblclick()
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=60000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                                   timeout=60000)
            page.wait_for_timeout(2000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            slider = page.locator(".jp-OutputArea .widget-hslider .noUi-handle, .jp-OutputArea .widget-slider .noUi-handle")
            slider.first.wait_for(timeout=180000)
            area = "document.querySelector('.widget-vbox .widget-output')"
            page.wait_for_function(f"(() => {{ const o = {area}; return o && o.textContent.includes('step 1 of'); }})()",
                                   timeout=120000)
            slider.first.scroll_into_view_if_needed()
            slider.first.focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_function(f"(() => {{ const o = {area}; return o && o.textContent.includes('step 2 of'); }})()",
                                   timeout=60000)
            text = page.locator(".widget-vbox .widget-output").first.text_content()
            page.screenshot(path=str(tmp / "lab-stepper.png"))
            ctx.close()
    assert "step 2 of" in text and "step 1 of" not in text and "CTA 0" in text and "warp" in text
    assert not external, f"JupyterLab asked the network for {external}"
