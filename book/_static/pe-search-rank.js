// The search page's ranking and snippets (appended to pe-search.js, which the build writes with the data).
// Sphinx's index gives every page that contains a word the same score, so its results came out in title
// order ("1.", "10.", "13.", ..., "2."). Here each result gains 100 * ln(1 + uses of the query's words on
// that page), and equal scores fall back to the book's order. Snippets are taken from prose (paragraphs,
// list items, headings), never from code, diffs, tables or figures.
(() => {
  const data = window.PE_SEARCH || {counts: {}, order: {}};
  const words = () => (new URLSearchParams(window.location.search).get("q") || "")
    .toLowerCase().split(/[^a-z0-9_]+/).filter((w) => w.length > 1);
  const uses = (docname) => {
    const c = data.counts[docname] || {};
    let n = 0;
    for (const w of words()) {
      for (const [k, v] of Object.entries(c)) {
        if (k === w || (w.length >= 4 && k.startsWith(w))) n += v;
      }
    }
    return n;
  };
  const patch = () => {
    if (typeof Scorer === "undefined" || typeof Search === "undefined") return;
    const n = Object.keys(data.order).length + 1;
    Scorer.score = (result) => {
      const [docname, , , , score] = result;
      const place = docname in data.order ? data.order[docname] : n;
      return score + 100 * Math.log1p(uses(docname)) + (n - place) / (100 * n);
    };
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      const main = (anchor && doc.querySelector(`[role="main"] ${anchor}`)) || doc.querySelector('[role="main"]');
      if (!main) return "";
      for (const q of [".headerlink", "script", "style", "pre", ".highlight", "table", ".pe-table", "figure",
                       "svg", ".pe-stage-header", ".pe-banner", ".cell_input", ".pe-code", ".pe-exercise"]) {
        main.querySelectorAll(q).forEach((el) => el.remove());
      }
      const parts = [];
      main.querySelectorAll("p, li, dt, dd, h1, h2, h3").forEach((el) => {
        if (!el.closest("li li, li p")) parts.push(el.textContent.replace(/\s+/g, " ").trim());
      });
      return parts.filter((t) => t).join(" ");
    };
  };
  document.addEventListener("DOMContentLoaded", patch);
})();
