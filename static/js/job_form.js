// The job form (portal/job_form.py): show the inputs of the chosen backend's work only, and mark the
// "If submitted now" preview as updating from an edit until htmx has swapped in the answer for it.
// Without this script every backend's inputs show, and the server reads the chosen backend's; the preview
// still refreshes (htmx), only without the "Updating…" note.
(function () {
  "use strict";
  function showWork(form) {
    var select = form.querySelector("select[name=backend]");
    if (!select) return;
    form.querySelectorAll(".work-for[data-backend]").forEach(function (block) {
      block.hidden = block.getAttribute("data-backend") !== select.value;
    });
  }
  function markUpdating(preview, note, updating) {
    if (!preview) return;
    if (updating) preview.setAttribute("aria-busy", "true");
    else preview.removeAttribute("aria-busy");
    if (note) note.hidden = !updating;
  }
  document.addEventListener("DOMContentLoaded", function () {
    var preview = document.getElementById("job-preview");
    var note = document.getElementById("job-preview-updating");
    var pending = 0; // edits made since the last answer arrived
    document.querySelectorAll("form[data-job-form]").forEach(function (form) {
      showWork(form);
      form.addEventListener("change", function (event) {
        if (event.target && event.target.name === "backend") showWork(form);
      });
      ["input", "change"].forEach(function (kind) {
        form.addEventListener(kind, function () {
          pending += 1;
          markUpdating(preview, note, true);
        });
      });
    });
    if (!preview) return;
    // The answer to the newest request: the request's own start clears the edits it carries.
    preview.addEventListener("htmx:beforeRequest", function () {
      pending = 0;
    });
    preview.addEventListener("htmx:afterSettle", function () {
      if (pending === 0) markUpdating(preview, note, false);
    });
    ["htmx:responseError", "htmx:sendError"].forEach(function (kind) {
      preview.addEventListener(kind, function () {
        if (pending === 0) markUpdating(preview, note, false);
      });
    });
  });
})();
