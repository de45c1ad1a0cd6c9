// Rackplane portal: a collapsible menu on phones, keyboard shortcuts, times in the viewer's
// time zone (absolute or relative, remembered in localStorage) and rows-per-page menus that apply at once.
// Served from static/ (no CDN); no inline script anywhere (Content-Security-Policy). Pages work without it.
(function () {
  "use strict";
  // The page's language (Django's JavaScript catalogue, /i18n/catalog.js, loaded before this script).
  var _ = window.gettext || function (text) { return text; };

  document.documentElement.classList.add("js");

  function typing(target) {
    if (!target || !target.closest) return false;
    return Boolean(target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']"));
  }

  // ---- the menu on narrow screens -------------------------------------------------------------------
  function setupMenu() {
    var toggle = document.querySelector("[data-menu-toggle]");
    var bar = document.querySelector(".topbar");
    if (!toggle || !bar) return;
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      var open = bar.classList.toggle("menu-open");
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
    });
  }

  // ---- an admin's "More" links in the header (a desktop's; on a phone they sit in the folded menu) -----
  function setupNavMore() {
    var more = document.querySelector("[data-nav-more].folds");
    if (!more) return;
    var button = more.querySelector(".nav-more-toggle");
    if (!button) return;
    button.hidden = false;
    function show(open) {
      more.classList.toggle("open", open);
      button.setAttribute("aria-expanded", open ? "true" : "false");
    }
    button.addEventListener("click", function () {
      show(!more.classList.contains("open"));
    });
    document.addEventListener("click", function (event) {
      if (!more.contains(event.target)) show(false);
    });
    more.addEventListener("focusout", function (event) {
      if (event.relatedTarget && !more.contains(event.relatedTarget)) show(false);
    });
    more.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && more.classList.contains("open")) {
        show(false);
        button.focus();
      }
    });
  }

  // ---- times ----------------------------------------------------------------------------------------
  var TIME_KEY = "rackplane.time";
  var MODES = ["absolute", "relative"];
  var zone = "";
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch (e) {
    zone = "";
  }

  function storedMode() {
    try {
      var mode = window.localStorage.getItem(TIME_KEY);
      return MODES.indexOf(mode) >= 0 ? mode : null;
    } catch (e) {
      return null;
    }
  }

  function storeMode(mode) {
    try {
      window.localStorage.setItem(TIME_KEY, mode);
    } catch (e) {
      /* private mode: the choice lasts for this page */
    }
  }

  function pad(n) {
    return (n < 10 ? "0" : "") + n;
  }

  function absolute(date) {
    return (
      date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds())
    );
  }

  function relative(date) {
    var seconds = Math.round((Date.now() - date.getTime()) / 1000);
    var future = seconds < 0;
    var s = Math.abs(seconds);
    var text;
    if (s < 45) text = s + " s";
    else if (s < 3600) text = Math.round(s / 60) + " min";
    else if (s < 86400) text = Math.round(s / 3600) + " h";
    else text = Math.round(s / 86400) + " d";
    if (s < 5) return _("now");
    var interpolate = window.interpolate || function (format, values) { return format.replace("%(time)s", values.time); };
    return interpolate(future ? _("in %(time)s") : _("%(time)s ago"), { time: text }, true);
  }

  var mode = null;

  function rewriteTimes(root) {
    // A log line's time (data-log-time) keeps the server's text: the viewer's zone, named, in a log's columns.
    (root || document).querySelectorAll("time[datetime]:not([data-log-time])").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      if (!el.hasAttribute("data-server-text")) el.setAttribute("data-server-text", el.textContent);
      var other = mode === "relative" ? absolute(date) + (zone ? " " + zone : "") : relative(date);
      if (mode === "absolute") el.textContent = absolute(date);
      else if (mode === "relative") el.textContent = relative(date);
      el.setAttribute("title", mode ? other : absolute(date) + (zone ? " " + zone : ""));
      el.setAttribute("data-time-mode", mode || "server");
    });
    var anyTime = Boolean(document.querySelector("time[datetime]"));
    document.querySelectorAll("[data-time-toggle]").forEach(function (button) {
      button.hidden = !anyTime;
      var shown = shownMode(button);
      var label = button.querySelector("[data-time-mode]");
      if (label) label.textContent = shown === "relative" ? _("how long ago") : shown === "absolute" ? yourZone() : serverZone(button);
      button.setAttribute("data-shows", shown || "server");
      button.setAttribute("aria-pressed", shown === "relative" ? "true" : "false");
      button.setAttribute("title", shown === "absolute" ? _("Show how long ago each time was") : interpolate(_("Show the times in your time zone, %(zone)s"), { zone: zone || "UTC" }));
    });
  }

  function interpolate(format, values) {
    return window.interpolate ? window.interpolate(format, values, true) : format.replace(/%\((\w+)\)s/g, function (all, name) { return values[name]; });
  }

  function yourZone() {
    return interpolate(_("your zone (%(zone)s)"), { zone: zone || "UTC" });
  }

  // The zone the server printed this page's times in (the toggle's data-server-zone: the viewer's once the
  // cookie below is set, UTC on the first page).
  function serverZone(button) {
    var sent = button.getAttribute("data-server-zone") || "UTC";
    return sent === zone ? yourZone() : sent;
  }

  // What the page's times show now: the mode chosen, or else what the server sent: "how long ago" when every
  // time on the page was sent so ("5 minutes ago"), times in the viewer's zone when the server used it, or
  // null (times in another zone, UTC on a first page: the label names it).
  function shownMode(button) {
    if (mode) return mode;
    var times = document.querySelectorAll("time[datetime]:not([data-log-time])");
    var clockTimes = Array.prototype.filter.call(times, function (el) {
      return /\d:\d\d|\d{4}-\d\d-\d\d/.test(el.getAttribute("data-server-text") || el.textContent);
    });
    if (times.length && !clockTimes.length) return "relative";
    return (button.getAttribute("data-server-zone") || "UTC") === zone ? "absolute" : null;
  }

  // The server prints times in the zone this cookie names (portal.web.middleware.ViewerTimezoneMiddleware):
  // kept equal to the browser's, so the next page is in the viewer's zone (this one may still be in UTC).
  function keepZoneCookie() {
    // IANA names are letters, digits, "_", "+", "-" and "/": all allowed in a cookie value as they are.
    if (!zone || zone.length > 64 || !/^[A-Za-z0-9_+\-\/]+$/.test(zone)) return;
    var name = "rackplane_tz=";
    var current = document.cookie.split("; ").filter(function (c) { return c.indexOf(name) === 0; })[0];
    if (current && current.slice(name.length) === zone) return;
    document.cookie = name + zone + "; path=/; max-age=31536000; SameSite=Lax" +
      (window.location.protocol === "https:" ? "; Secure" : "");
  }

  function setupTimes() {
    keepZoneCookie();
    mode = storedMode();
    rewriteTimes(document);
    document.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest("[data-time-toggle]");
      if (!button) return;
      mode = shownMode(button) === "absolute" ? "relative" : "absolute";
      storeMode(mode);
      rewriteTimes(document);
    });
    document.addEventListener("htmx:afterSettle", function (event) {
      rewriteTimes(event.target);
    });
  }

  // ---- rows per page: the menu applies itself -------------------------------------------------------
  function setupAutosubmit() {
    document.addEventListener("change", function (event) {
      var select = event.target;
      if (select.matches && select.matches("select[data-autosubmit]") && select.form) select.form.submit();
    });
  }

  // ---- copy buttons: <button data-copy="ID"> copies the text of #ID (shown only with JavaScript) ---------
  function setupCopy() {
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.hidden = false;
    });
    document.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest("[data-copy]");
      if (!button) return;
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (!source || !navigator.clipboard) return;
      var label = button.getAttribute("data-label") || button.textContent;
      button.setAttribute("data-label", label);
      navigator.clipboard.writeText(source.textContent.trim()).then(
        function () {
          button.textContent = _("Copied");
        },
        function () {
          button.textContent = _("Select and copy it");
        }
      );
      setTimeout(function () {
        button.textContent = label;
      }, 2000);
    });
  }

  // ---- keyboard shortcuts ---------------------------------------------------------------------------
  var SHORTCUTS = [
    ["/", _("Focus the search box")],
    [_("j or ↓"), _("Next tray (rack view)")],
    [_("k or ↑"), _("Previous tray (rack view)")],
    ["Esc", _("Close the detail panel or this list")],
    ["?", _("Show this list")],
  ];

  function shortcutDialog() {
    var dialog = document.getElementById("shortcuts");
    if (dialog) return dialog;
    dialog = document.createElement("dialog");
    dialog.id = "shortcuts";
    dialog.className = "shortcuts";
    dialog.setAttribute("aria-labelledby", "shortcuts-title");
    var title = document.createElement("h2");
    title.id = "shortcuts-title";
    title.textContent = _("Keyboard shortcuts");
    dialog.appendChild(title);
    var list = document.createElement("dl");
    SHORTCUTS.forEach(function (pair) {
      var dt = document.createElement("dt");
      var kbd = document.createElement("kbd");
      kbd.textContent = pair[0];
      dt.appendChild(kbd);
      var dd = document.createElement("dd");
      dd.textContent = pair[1];
      list.appendChild(dt);
      list.appendChild(dd);
    });
    dialog.appendChild(list);
    var form = document.createElement("form");
    form.method = "dialog";
    var close = document.createElement("button");
    close.type = "submit";
    close.className = "button";
    close.textContent = _("Close");
    form.appendChild(close);
    dialog.appendChild(form);
    document.body.appendChild(dialog);
    return dialog;
  }

  var movedByKey = false;

  function moveTray(step) {
    var trays = Array.prototype.slice.call(document.querySelectorAll(".rack-grid button.tray"));
    if (!trays.length) return false;
    var current = trays.indexOf(document.activeElement);
    if (current < 0) current = trays.findIndex(function (el) { return el.classList.contains("is-selected"); });
    if (current < 0) {
      var gpu = document.activeElement && document.activeElement.closest && document.activeElement.closest(".tray-row");
      if (gpu) current = trays.indexOf(gpu.querySelector("button.tray"));
    }
    var next = current < 0 ? (step > 0 ? 0 : trays.length - 1) : Math.min(trays.length - 1, Math.max(0, current + step));
    var target = trays[next];
    target.focus();
    if (!target.classList.contains("is-selected")) {
      // A tray moved past quickly must not answer last and fill the panel: drop its request.
      if (window.htmx) {
        trays.forEach(function (el) {
          if (el.classList.contains("htmx-request")) window.htmx.trigger(el, "htmx:abort");
        });
      }
      movedByKey = true;
      target.click();
    }
    return true;
  }

  function inRack() {
    var active = document.activeElement;
    return Boolean(active && active.closest && active.closest(".rack-grid-wrap"));
  }

  function setupShortcuts() {
    document.addEventListener("keydown", function (event) {
      if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
      if (typing(event.target)) return;
      var key = event.key;
      if (key === "/") {
        var search = document.getElementById("header-search-q");
        if (!search) return;
        var bar = document.querySelector(".topbar");
        if (bar && search.offsetParent === null) bar.classList.add("menu-open");
        event.preventDefault();
        search.focus();
        search.select();
      } else if (key === "?") {
        event.preventDefault();
        var dialog = shortcutDialog();
        if (dialog.open) dialog.close();
        else if (dialog.showModal) dialog.showModal();
        else dialog.setAttribute("open", "");
      } else if (key === "j" || key === "k" || ((key === "ArrowDown" || key === "ArrowUp") && inRack())) {
        if (moveTray(key === "j" || key === "ArrowDown" ? 1 : -1)) event.preventDefault();
      }
    });
  }

  // ---- the rack view on a narrow screen: the detail panel sits under the grid, so bring it into view ----
  document.addEventListener("htmx:afterSwap", function (event) {
    var panel = event.target;
    if (!panel || panel.id !== "detail" || !window.matchMedia("(max-width: 1100px)").matches) return;
    if (movedByKey) {
      movedByKey = false; // moving with j/k: stay on the grid
      return;
    }
    panel.scrollIntoView({ block: "start" });
  });

  document.addEventListener("DOMContentLoaded", function () {
    setupMenu();
    setupNavMore();
    setupTimes();
    setupAutosubmit();
    setupCopy();
    setupShortcuts();
  });
})();
