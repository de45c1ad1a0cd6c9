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
})();
