// Dashboards that are "now" (portal/gpu_life.py): every element with data-refresh-every="<seconds>" and
// hx-trigger="refresh" is refreshed by htmx that often, only while the tab is shown. A tab that comes
// back after being hidden longer than the period refreshes at once. No inline script (CSP).
(function () {
  "use strict";

  function stamp() {
    var now = Date.now();
    document.querySelectorAll("[data-refresh-every]:not([data-refreshed-at])").forEach(function (el) {
      el.setAttribute("data-refreshed-at", String(now));
    });
  }

  function tick() {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    var now = Date.now();
    document.querySelectorAll("[data-refresh-every]").forEach(function (el) {
      var every = parseInt(el.getAttribute("data-refresh-every"), 10) * 1000;
      var last = parseInt(el.getAttribute("data-refreshed-at") || "0", 10);
      if (!(every > 0) || now - last < every || el.classList.contains("htmx-request")) return;
      el.setAttribute("data-refreshed-at", String(now));
      window.htmx.trigger(el, "refresh");
    });
  }

  // A page that had no chart when it loaded has no plotly.js (4.7 MB): a swapped-in chart loads it once,
  // then asks for its fragment again so static/js/portal.js draws it.
  function needPlotly(event) {
    var panel = event.target && event.target.closest ? event.target.closest("[data-plotly-src]") : null;
    if (window.Plotly || !panel || !panel.querySelector("[data-plotly-figure]")) return;
    if (document.querySelector("script[data-plotly-loader]")) return;
    var script = document.createElement("script");
    script.src = panel.getAttribute("data-plotly-src");
    script.setAttribute("data-plotly-loader", "");
    script.onload = function () {
      var current = document.getElementById(panel.id) || panel;
      window.htmx.trigger(current, "refresh");
    };
    document.head.appendChild(script);
  }

  document.addEventListener("DOMContentLoaded", stamp);
  document.addEventListener("htmx:afterSettle", stamp);
  document.addEventListener("htmx:afterSettle", needPlotly);
  document.addEventListener("visibilitychange", tick);
  setInterval(tick, 1000);
})();
