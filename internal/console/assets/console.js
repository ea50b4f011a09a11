// Reeve console: theme toggle, copy buttons, keyboard navigation of lists,
// confirmation of inline actions, and pausing live list reloads while rows
// are selected. No inline scripts anywhere (the CSP forbids them).
(function () {
  "use strict";
  var root = document.documentElement;

  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (t.id === "theme-toggle") {
      var dark = root.getAttribute("data-theme") === "dark" ||
        (!root.getAttribute("data-theme") && matchMedia("(prefers-color-scheme: dark)").matches);
      var next = dark ? "light" : "dark";
      root.setAttribute("data-theme", next);
      localStorage.setItem("reeve-theme", next);
      return;
    }
    if (t.matches && t.matches("button.copy")) {
      var src = document.querySelector(t.getAttribute("data-copy"));
      if (src && navigator.clipboard) {
        navigator.clipboard.writeText(src.textContent).then(function () {
          t.textContent = "copied"; setTimeout(function () { t.textContent = "copy"; }, 1200);
        });
      }
      return;
    }
    if (t.matches && t.matches("[data-confirm]")) {
      if (!confirm(t.getAttribute("data-confirm"))) ev.preventDefault();
      return;
    }
    if (t.id === "select-all") {
      document.querySelectorAll("#task-rows input[name=id]").forEach(function (c) { c.checked = t.checked; });
      return;
    }
    var row = t.closest && t.closest("tr.row[data-href]");
    if (row && !t.closest("a,input,button,label,form")) location.href = row.getAttribute("data-href");
  });

  // A form posted from the page navigates away: skip live reloads from then
  // on. A reload that replaced the form while its submission starts would
  // make the browser abort it (net::ERR_ABORTED): the operator's action lost.
  var posting = false;
  document.addEventListener("submit", function (ev) { if (!ev.defaultPrevented) posting = true; });
  window.addEventListener("pageshow", function () { posting = false; });
  document.addEventListener("htmx:beforeRequest", function (ev) { if (posting) ev.preventDefault(); });
  document.addEventListener("htmx:beforeSwap", function (ev) { if (posting) ev.detail.shouldSwap = false; });

  // Keep selected rows: skip a live reload of the list while any is checked.
  document.addEventListener("htmx:beforeRequest", function (ev) {
    if (ev.detail.elt && ev.detail.elt.id === "task-rows" && document.querySelector("#task-rows input[name=id]:checked")) ev.preventDefault();
  });

  // j/k (or arrows) move between rows of the page's first list, Enter opens,
  // / focuses the first filter field, g then t/a/w/o go to a page.
  var cur = -1;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("tr.row[data-href]")); }
  function focusRow(i) {
    var r = rows(); if (!r.length) return;
    cur = Math.max(0, Math.min(r.length - 1, i));
    r.forEach(function (x) { x.classList.remove("focus"); });
    r[cur].classList.add("focus"); r[cur].scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (ev) {
    var tag = (ev.target.tagName || "").toLowerCase();
    if (tag === "input" || tag === "select" || tag === "textarea" || ev.metaKey || ev.ctrlKey || ev.altKey) return;
    if (ev.key === "j" || ev.key === "ArrowDown") { focusRow(cur + 1); ev.preventDefault(); }
    else if (ev.key === "k" || ev.key === "ArrowUp") { focusRow(cur - 1); ev.preventDefault(); }
    else if (ev.key === "Enter" && cur >= 0) { var r = rows()[cur]; if (r) location.href = r.getAttribute("data-href"); }
    else if (ev.key === "x" && cur >= 0) { var c = rows()[cur].querySelector("input[type=checkbox]"); if (c) c.checked = !c.checked; }
    else if (ev.key === "/") { var f = document.querySelector(".filters input:not([type=hidden])"); if (f) { f.focus(); ev.preventDefault(); } }
    else if (ev.key === "?") { alert("j/k or ↓/↑: move · Enter: open · x: select row · /: filter · Alt+Shift+t/a/w/o/g: pages"); }
  });
})();
