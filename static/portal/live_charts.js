// Dashboards that are "now" (scheduling/views/gpu_life.py): every element with data-refresh-every="<seconds>" and
// hx-trigger="refresh" is refreshed by htmx that often, only while the tab is shown. A tab that comes
// back after being hidden longer than the period refreshes at once. Charts take the page's theme colours
// (below). No inline script (CSP).
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

  // The charts follow the page's theme (prefers-color-scheme, static/css/portal.css): scheduling/charts.py gives
  // them transparent backgrounds; here each drawn chart takes its text, grid and hover colours from the
  // page's CSS custom properties, and takes them again when the system switches between light and dark.
  var DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function palette() {
    var style = getComputedStyle(document.documentElement);
    function read(name, fallback) {
      return style.getPropertyValue(name).trim() || fallback;
    }
    return {
      scheme: DARK && DARK.matches ? "dark" : "light",
      text: read("--text", "#17202c"),
      muted: read("--muted", "#5b6677"),
      border: read("--border", "#d9dee7"),
      surface: read("--surface", "#ffffff"),
      focus: read("--focus", "#2563eb"),
    };
  }

  function themeCharts(force) {
    if (!window.Plotly) return;
    var colours = null;
    document.querySelectorAll(".js-plotly-plot").forEach(function (el) {
      colours = colours || palette();
      if (!el.layout || (!force && el.getAttribute("data-chart-theme") === colours.scheme)) return;
      var update = {
        paper_bgcolor: "rgba(0,0,0,0)",
        plot_bgcolor: "rgba(0,0,0,0)",
        "font.color": colours.text,
        "hoverlabel.bgcolor": colours.surface,
        "hoverlabel.bordercolor": colours.border,
        "hoverlabel.font.color": colours.text,
        "modebar.bgcolor": "rgba(0,0,0,0)",
        "modebar.color": colours.muted,
        "modebar.activecolor": colours.focus,
      };
      Object.keys(el.layout).forEach(function (key) {
        if (!/^[xy]axis\d*$/.test(key)) return;
        update[key + ".gridcolor"] = colours.border;
        update[key + ".linecolor"] = colours.border;
        update[key + ".zerolinecolor"] = colours.border;
      });
      el.setAttribute("data-chart-theme", colours.scheme);
      window.Plotly.relayout(el, update);
      recolourTraces(el, colours.scheme);
    });
  }

  // Trace colours too dark to see on the dark surface (scheduling/charts.py GUARANTEE), and what they become there.
  var ON_DARK = { "#334155": "#cbd5e1" };

  function recolourTraces(el, scheme) {
    var figure;
    try {
      figure = JSON.parse(el.getAttribute("data-plotly-figure") || "{}");
    } catch (error) {
      return;
    }
    (figure.data || []).forEach(function (trace, index) {
      ["line", "marker"].forEach(function (part) {
        var colour = trace[part] && trace[part].color;
        if (typeof colour !== "string" || !ON_DARK[colour.toLowerCase()]) return;
        var update = {};
        update[part + ".color"] = scheme === "dark" ? ON_DARK[colour.toLowerCase()] : colour;
        window.Plotly.restyle(el, update, [index]);
      });
    });
  }

  // static/js/portal.js draws the charts on these same events (its listeners come first: base.html loads it
  // before this file); the timeout also covers a chart it draws later in the same turn.
  function themeSoon() {
    themeCharts(false);
    setTimeout(function () { themeCharts(false); }, 0);
  }

  document.addEventListener("DOMContentLoaded", themeSoon);
  document.addEventListener("htmx:afterSettle", themeSoon);
  if (DARK) {
    var onChange = function () { themeCharts(true); };
    if (DARK.addEventListener) DARK.addEventListener("change", onChange);
    else if (DARK.addListener) DARK.addListener(onChange);
  }

  document.addEventListener("DOMContentLoaded", stamp);
  document.addEventListener("htmx:afterSettle", stamp);
  document.addEventListener("htmx:afterSettle", needPlotly);
  document.addEventListener("visibilitychange", tick);
  setInterval(tick, 1000);
})();
