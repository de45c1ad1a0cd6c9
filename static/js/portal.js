// Rackplane portal: small progressive enhancements on top of htmx. The pages work without this file.
(function () {
  "use strict";

  // Mark the tray or GPU whose detail the side panel shows.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var source = event.detail && event.detail.elt;
    if (!source || !source.matches || !source.matches("button.gpu, button.tray")) return;
    document.querySelectorAll("button.is-selected").forEach(function (el) {
      el.classList.remove("is-selected");
      el.removeAttribute("aria-pressed");
    });
    source.classList.add("is-selected");
    source.setAttribute("aria-pressed", "true");
  });

  // Escape closes the panel back to its placeholder.
  var placeholder = null;
  document.addEventListener("DOMContentLoaded", function () {
    var panel = document.querySelector("aside#detail");
    if (panel) placeholder = panel.innerHTML;
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || placeholder === null) return;
    var panel = document.querySelector("aside#detail");
    if (!panel) return;
    panel.innerHTML = placeholder;
    document.querySelectorAll("button.is-selected").forEach(function (el) {
      el.classList.remove("is-selected");
      el.removeAttribute("aria-pressed");
    });
  });

  // Charts (portal/charts.py): each div carries its figure as JSON; drawn here because the
  // Content-Security-Policy allows no inline script. Idempotent, so htmx swaps can call it again.
  function drawCharts() {
    if (!window.Plotly) return;
    document.querySelectorAll("[data-plotly-figure]:not([data-plotly-drawn])").forEach(function (el) {
      var figure = JSON.parse(el.getAttribute("data-plotly-figure"));
      var config = JSON.parse(el.getAttribute("data-plotly-config") || "{}");
      el.setAttribute("data-plotly-drawn", "");
      Promise.resolve(window.Plotly.newPlot(el, figure.data, figure.layout, config)).then(function () { fit(el); });
      // plotly's own `responsive` listens to the window's resize only once a draw has finished: a resize
      // during the first draw (a phone turned, a slow page) left the chart at the old width, wider than the
      // screen. Its box changing size redraws it at the new width.
      if (window.ResizeObserver) new ResizeObserver(function () { fit(el); }).observe(el);
    });
  }
  function fit(el) {
    if (!el.isConnected || !el._fullLayout || !el.clientWidth) return;
    if (Math.abs(el._fullLayout.width - el.clientWidth) > 1) window.Plotly.Plots.resize(el);
  }
  document.addEventListener("DOMContentLoaded", drawCharts);
  document.addEventListener("htmx:afterSettle", drawCharts);

  // A form marked data-swap-errors shows a 400 answer (what to change, in words) where its result goes,
  // as the page without htmx would; htmx otherwise drops error responses.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var source = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.xhr.status === 400 && source && source.closest && source.closest("[data-swap-errors]")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
