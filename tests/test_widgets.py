"""pelib.views.widgets.sweep: renders the chosen option, follows the slider, shows its static fallback."""
import pytest

from pelib.views import widgets
from pelib.views.widgets import WidgetError


def test_initial_render_and_selection():
    seen = []
    s = widgets.sweep([1, 2, 3], lambda v: seen.append(v) or f"value {v}", value=2, description="stages")
    assert seen == [2] and s.value == 2 and s.renders == 1
    assert s.select(3) == "value 3"
    assert seen == [2, 3] and s.value == 3


def test_slider_drives_render():
    seen = []
    s = widgets.sweep([1, 2, 3], seen.append)
    assert s.control is not None and s.control.value == 1
    s.control.value = 3                 # what a reader's drag does
    assert seen == [1, 3]


def test_labelled_options():
    s = widgets.sweep([("one stage", 1), ("five stages", 5)], lambda v: v * 10)
    assert [lab for lab, _ in s.options] == ["one stage", "five stages"]
    assert s.select(5) == 50


def test_static_fallback_is_displayed_first(monkeypatch):
    shown = []
    monkeypatch.setattr(widgets, "_display", lambda obj: shown.append(obj))
    import IPython.display
    monkeypatch.setattr(IPython.display, "publish_display_data", lambda data: shown.append(data))
    s = widgets.sweep([1, 2], lambda v: v, static=lambda: "TABLE")
    shown.clear()
    s._ipython_display_()
    assert shown[0] == "TABLE"
    assert shown[1]["text/plain"] == widgets.Sweep.PLACEHOLDER
    assert shown[1]["application/vnd.jupyter.widget-view+json"]["model_id"] == s.box.model_id


def test_no_widget_mode_still_renders():
    s = widgets.sweep([1, 2], lambda v: v + 1, live=False, static="T")
    assert s.control is None and s.box is None and s.select(2) == 3


@pytest.mark.parametrize("bad", [dict(options=[]), dict(options=[1, 1]), dict(options=[1, 2], value=7),
                                 dict(options=[1], render=None)])
def test_bad_setups_are_refused(bad):
    kw = {"options": [1, 2], "render": lambda v: v}
    kw.update(bad)
    with pytest.raises(WidgetError):
        widgets.sweep(kw.pop("options"), kw.pop("render"), **kw)


def test_select_unknown_value():
    s = widgets.sweep([1, 2], lambda v: v)
    with pytest.raises(WidgetError, match="not one of"):
        s.select(9)


def test_offline_view_switches_precomputed_panels():
    import re
    s = widgets.sweep([1, 2, 3], lambda v: f"value {v}", value=2, description="stages", live=False)
    html = s.mimebundle()["text/html"]
    assert html.count('class="pe-sweep-panel"') == 3 and html.count(" hidden>") == 2
    assert re.search(r'data-key="1"><div class="pe-note">value 2</div>', html)   # the initial one shows
    assert 'type="range"' in html and 'max="2"' in html


def test_offline_grid_covers_the_leading_controls():
    seen = []
    html = widgets.offline_grid_html({"a": [("1", 1), ("2", 2)], "b": [("x", "x"), ("y", "y")],
                                      "c": [(str(i), i) for i in range(50)]},
                                     lambda **v: seen.append(v) or str(v), {"a": 1, "b": "y", "c": 7})
    assert len(seen) == 4 and all(v["c"] == 7 for v in seen)      # c held at its value, said so
    assert "c stays at 7" in html and html.count('type="range"') == 2


def test_the_book_build_embeds_the_offline_view(monkeypatch):
    s = widgets.sweep([1, 2], lambda v: v)
    assert "text/html" not in s.mimebundle()                      # JupyterLab: the live widget alone
    monkeypatch.setenv(widgets.BOOK_BUILD_ENV, "1")
    b = s.mimebundle()
    assert "application/vnd.jupyter.widget-view+json" in b and "pe-sweep" in b["text/html"]
