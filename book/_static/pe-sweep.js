// Offline sweep views (pelib.views.widgets): every position was computed when the page was built;
// the sliders only choose which precomputed panel is shown. No kernel, no network.
(function () {
  "use strict";
  function wire(view) {
    var inputs = view.querySelectorAll("input.pe-sweep-range");
    var panels = view.querySelectorAll(".pe-sweep-panel");
    function show() {
      var key = [];
      inputs.forEach(function (inp) {
        var labels = JSON.parse(inp.dataset.labels);
        key.push(inp.value);
        var out = view.querySelector('output[for="' + inp.id + '"]');
        if (out) { out.textContent = labels[+inp.value]; }
      });
      key = key.join(",");
      panels.forEach(function (p) { p.hidden = p.dataset.key !== key; });
    }
    inputs.forEach(function (inp) { inp.addEventListener("input", show); });
    show();
  }
  function init() { document.querySelectorAll(".pe-sweep").forEach(wire); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
})();
