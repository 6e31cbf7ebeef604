// Judgment browser index: filter, sort and paginate rows loaded from data/index-NNN.js.
// Every value from the data is written with textContent (never innerHTML): proofs and
// model outputs are untrusted.
(function () {
  "use strict";
  var JB = window.JB || { chunks: [] };
  var cfg = JB.config || { pageSize: 200, flags: {} };
  var rows = [];
  (JB.chunks || []).forEach(function (c) { if (c) rows = rows.concat(c); });
  var FLAG_SHORT = { false_accept: "FA", false_reject: "FR", parse_failure: "PF", disagreement: "DIS", wrong_step: "WS" };
  var DEFAULTS = { f: "all", gold: "", verdict: "", split: "", subject: "", q: "", sort: "n", dir: "asc", p: 1 };
  var state = {};
  Object.keys(DEFAULTS).forEach(function (k) { state[k] = DEFAULTS[k]; });

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function readHash() {
    Object.keys(DEFAULTS).forEach(function (k) { state[k] = DEFAULTS[k]; });
    var h = window.location.hash.replace(/^#/, "");
    h.split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      var k = decodeURIComponent(i < 0 ? kv : kv.slice(0, i));
      var v = i < 0 ? "" : decodeURIComponent(kv.slice(i + 1));
      if (Object.prototype.hasOwnProperty.call(DEFAULTS, k)) state[k] = k === "p" ? (parseInt(v, 10) || 1) : v;
    });
  }

  function writeHash() {
    var parts = [];
    Object.keys(state).forEach(function (k) {
      if (state[k] !== "" && state[k] !== DEFAULTS[k]) parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(state[k]));
    });
    var h = parts.length ? "#" + parts.join("&") : " ";
    history.replaceState(null, "", h === " " ? window.location.pathname : h);
  }

  function matches(r) {
    if (state.f !== "all" && r.flags.indexOf(state.f) < 0) return false;
    if (state.gold && (r.gold || "unannotated") !== state.gold) return false;
    if (state.verdict && r.v !== state.verdict) return false;
    if (state.split && r.split !== state.split) return false;
    if (state.subject && r.subj !== state.subject) return false;
    if (state.q) {
      var q = state.q.toLowerCase();
      if ((r.id + " " + r.prob + " " + r.subj + " " + r.split).toLowerCase().indexOf(q) < 0) return false;
    }
    return true;
  }

  function sortValue(r, key) {
    var v = r[key];
    if (key === "flags") return v.length;
    if (key === "gold") return (r.gold || "~") + (r.gstep === null || r.gstep === undefined ? "" : String(1000000 + r.gstep));
    return v;
  }

  function compare(a, b) {
    var x = sortValue(a, state.sort), y = sortValue(b, state.sort);
    var nx = x === null || x === undefined || x === "", ny = y === null || y === undefined || y === "";
    if (nx || ny) return nx && ny ? a.n - b.n : (nx ? 1 : -1);  // empty values last either way
    var c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
    if (c === 0) return a.n - b.n;  // ties keep the file order in both directions
    return state.dir === "desc" ? -c : c;
  }

  function stepText(s) { return s === null || s === undefined ? "?" : (s < 0 ? "none" : "step " + s); }

  function cell(tr, content, cls) {
    var td = el("td", null, cls);
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    tr.appendChild(td);
    return td;
  }

  function renderRow(r) {
    var tr = el("tr");
    tr.dataset.id = r.id;
    cell(tr, String(r.n), "num");
    var a = el("a", r.id);
    a.href = r.href;
    cell(tr, a, "id");
    var g = r.gold ? r.gold + (r.gold === "invalid" ? " (" + stepText(r.gstep) + ")" : "") : "unannotated";
    cell(tr, g, "pol " + (r.gold || "none"));
    var vd = r.v ? r.v + (r.v === "invalid" ? " (" + stepText(r.step) + ")" : "") : "—";
    cell(tr, vd, "pol " + (r.v || "none"));
    var af = el("span");
    if (r.af === null || r.af === undefined) af.textContent = "—"; else {
      var bar = el("span", null, "bar");
      bar.style.width = Math.round(r.af * 40) + "px";
      af.appendChild(bar);
      af.appendChild(el("span", r.af.toFixed(2)));
    }
    cell(tr, af, "num");
    cell(tr, r.np ? r.nok + "/" + r.np : "—", "num");
    cell(tr, r.mg || "—", "grade");
    cell(tr, r.subj || "");
    cell(tr, r.split || "");
    var fl = el("span");
    r.flags.forEach(function (f) {
      var b = el("span", FLAG_SHORT[f] || f, "flag " + f);
      b.title = (cfg.flags && cfg.flags[f]) || f;
      fl.appendChild(b);
    });
    cell(tr, fl, "flags");
    cell(tr, r.prob, "prob");
    return tr;
  }

  function renderPager(id, page, pages, total, shown) {
    var box = document.getElementById(id);
    box.textContent = "";
    var prev = el("button", "‹ prev");
    prev.type = "button"; prev.className = "prev"; prev.disabled = page <= 1;
    prev.addEventListener("click", function () { state.p = page - 1; update(); });
    var next = el("button", "next ›");
    next.type = "button"; next.className = "next"; next.disabled = page >= pages;
    next.addEventListener("click", function () { state.p = page + 1; update(); });
    var first = (page - 1) * cfg.pageSize;
    var info = el("span", total ? "rows " + (first + 1) + "–" + (first + shown) + " of " + total +
      " (page " + page + " of " + pages + ")" : "no rows match", "info");
    box.appendChild(prev); box.appendChild(info); box.appendChild(next);
  }

  function update() {
    var filtered = rows.filter(matches);
    filtered.sort(compare);
    var pages = Math.max(1, Math.ceil(filtered.length / cfg.pageSize));
    if (state.p > pages) state.p = pages;
    if (state.p < 1) state.p = 1;
    var slice = filtered.slice((state.p - 1) * cfg.pageSize, state.p * cfg.pageSize);
    var tbody = document.getElementById("rows");
    var frag = document.createDocumentFragment();
    slice.forEach(function (r) { frag.appendChild(renderRow(r)); });
    tbody.textContent = "";
    tbody.appendChild(frag);
    renderPager("pager-top", state.p, pages, filtered.length, slice.length);
    renderPager("pager-bottom", state.p, pages, filtered.length, slice.length);
    document.querySelectorAll("button.filter").forEach(function (b) {
      b.setAttribute("aria-pressed", b.dataset.filter === state.f ? "true" : "false");
    });
    document.querySelectorAll("th[data-key]").forEach(function (th) {
      th.setAttribute("aria-sort", th.dataset.key === state.sort ? (state.dir === "asc" ? "ascending" : "descending") : "none");
    });
    ["gold", "verdict", "split", "subject"].forEach(function (k) { document.getElementById(k).value = state[k]; });
    var q = document.getElementById("q");
    if (q.value !== state.q) q.value = state.q;
    document.body.dataset.shown = String(filtered.length);
    writeHash();
  }

  function fillSelect(id, key) {
    var sel = document.getElementById(id);
    var seen = {};
    rows.forEach(function (r) { if (r[key]) seen[r[key]] = (seen[r[key]] || 0) + 1; });
    Object.keys(seen).sort().forEach(function (v) {
      var o = el("option", v + " (" + seen[v] + ")");
      o.value = v;
      sel.appendChild(o);
    });
    if (!Object.keys(seen).length) sel.parentNode.hidden = true;
  }

  function init() {
    fillSelect("split", "split");
    fillSelect("subject", "subj");
    readHash();
    document.querySelectorAll("button.filter").forEach(function (b) {
      b.addEventListener("click", function () { state.f = b.dataset.filter; state.p = 1; update(); });
    });
    ["gold", "verdict", "split", "subject"].forEach(function (k) {
      document.getElementById(k).addEventListener("change", function (e) { state[k] = e.target.value; state.p = 1; update(); });
    });
    document.getElementById("q").addEventListener("input", function (e) { state.q = e.target.value; state.p = 1; update(); });
    document.querySelectorAll("th[data-key]").forEach(function (th) {
      th.tabIndex = 0;
      var go = function () {
        var k = th.dataset.key;
        if (state.sort === k) state.dir = state.dir === "asc" ? "desc" : "asc"; else { state.sort = k; state.dir = "asc"; }
        state.p = 1;
        update();
      };
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
    });
    window.addEventListener("hashchange", function () { readHash(); update(); });
    update();
    document.body.dataset.ready = "1";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
