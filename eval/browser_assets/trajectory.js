// Typeset LaTeX in the text blocks with the vendored KaTeX (if the site was built with it).
// auto-render only reads text nodes and KaTeX runs with trust: false, so untrusted text stays text.
(function () {
  "use strict";
  function run() {
    if (typeof window.renderMathInElement !== "function") { document.body.dataset.math = "raw"; return; }
    var opts = {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "\\[", right: "\\]", display: true },
        { left: "\\(", right: "\\)", display: false },
        { left: "$", right: "$", display: false }
      ],
      throwOnError: false,
      trust: false,
      strict: "ignore",
      maxExpand: 1000
    };
    document.querySelectorAll(".tex").forEach(function (e) {
      try { window.renderMathInElement(e, opts); } catch (err) { e.classList.add("tex-error"); }
    });
    document.body.dataset.math = "katex";
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run); else run();
})();
