// flysift workbench: progressive enhancement only (every page works without it).
// - "/" focuses the search box (when not typing in a field);
// - passage ids get a "Copy id" button;
// - after following a link to a passage, focus moves there for keyboard and screen-reader users.
(function () {
  "use strict";
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
    var box = document.getElementById("q") || document.getElementById("tq");
    if (box) { e.preventDefault(); box.focus(); box.select(); }
  });
  function ready() {
    if (navigator.clipboard) {
      document.querySelectorAll("button.copy[data-copy]").forEach(function (b) {
        b.hidden = false;
        b.addEventListener("click", function () {
          navigator.clipboard.writeText(b.getAttribute("data-copy")).then(function () {
            b.textContent = "Copied";
            setTimeout(function () { b.textContent = "Copy id"; }, 1500);
          });
        });
      });
    }
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.classList.contains("passage")) {
      target.setAttribute("tabindex", "-1");
      target.focus({ preventScroll: false });
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready); else ready();
})();
