// leasecron dashboard: the page's only script (CSP script-src 'self').
// 1. Live refresh: every data-refresh seconds, while the tab is visible
//    and no form field is being edited, fetch this page again and swap in
//    its [data-live] regions (same ids). The server shares its reads
//    between viewers, so N open tabs cost what one does.
// 2. Confirmation: a form with data-confirm asks before it submits.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 10;
  var busy = false;

  function editing() {
    var a = document.activeElement;
    return a && a.form && a.tagName !== "BUTTON";
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live][id]").forEach(function (el) {
      var fresh = doc.getElementById(el.id);
      if (fresh && fresh.hasAttribute("data-live")) {
        // Keep open <details> open across a refresh.
        var open = {};
        el.querySelectorAll("details[open]").forEach(function (d, i) { open[i] = true; });
        el.replaceWith(fresh);
        fresh.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
      }
    });
    body.classList.remove("stale");
  }

  // A page with nothing live but the "updated" stamp (the count of a bulk
  // operation to confirm) is not fetched again: each fetch would redo
  // its uncached read and show nothing new.
  var live = document.querySelector("[data-live]:not(#updated)") !== null;

  function refresh() {
    if (!live || busy || document.visibilityState !== "visible" || editing()) return;
    busy = true;
    fetch(location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status);
        return r.text();
      })
      .then(swap)
      .catch(function () { body.classList.add("stale"); })
      .finally(function () { busy = false; });
  }

  setInterval(refresh, every * 1000);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") refresh();
  });

  document.addEventListener("submit", function (e) {
    var f = e.target;
    var msg = f.getAttribute && f.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
})();
