// The job form (portal/job_form.py): show the inputs of the chosen backend's work only.
// Without this script every backend's inputs show, and the server reads the chosen backend's.
(function () {
  "use strict";
  function showWork(form) {
    var select = form.querySelector("select[name=backend]");
    if (!select) return;
    form.querySelectorAll(".work-for[data-backend]").forEach(function (block) {
      block.hidden = block.getAttribute("data-backend") !== select.value;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-job-form]").forEach(function (form) {
      showWork(form);
      form.addEventListener("change", function (event) {
        if (event.target && event.target.name === "backend") showWork(form);
      });
    });
  });
})();
