// The header search box's typeahead. htmx asks /search/suggest/ as one types (the input's hx-get, 200 ms
// after the last key; a newer request replaces an older one) and puts the options into the listbox; this
// script opens and closes it and moves through it with the keyboard, as the ARIA combobox pattern says:
// ArrowDown / ArrowUp move the highlighted option (aria-activedescendant), Enter opens it (with none
// highlighted, Enter searches as before), Escape closes the list (a second Escape clears the box), Home /
// End go to the first and last option. Served by the portal; no inline script (the Content-Security-Policy).
(function () {
  "use strict";

  function setup() {
    var box = document.getElementById("header-search-q");
    var list = document.getElementById("header-search-list");
    if (!box || !list) return;

    function options() {
      return Array.prototype.slice.call(list.querySelectorAll('[role="option"]'));
    }

    function active() {
      var id = box.getAttribute("aria-activedescendant");
      return id ? document.getElementById(id) : null;
    }

    function highlight(option) {
      options().forEach(function (el) {
        el.setAttribute("aria-selected", el === option ? "true" : "false");
      });
      if (option) {
        box.setAttribute("aria-activedescendant", option.id);
        option.scrollIntoView({ block: "nearest" });
      } else {
        box.removeAttribute("aria-activedescendant");
      }
    }

    function open() {
      if (!options().length) return close();
      list.hidden = false;
      box.setAttribute("aria-expanded", "true");
    }

    function close() {
      list.hidden = true;
      box.setAttribute("aria-expanded", "false");
      highlight(null);
    }

    function move(step) {
      var all = options();
      if (!all.length) return;
      if (list.hidden) open();
      var index = all.indexOf(active());
      var next = index < 0 ? (step > 0 ? 0 : all.length - 1) : (index + step + all.length) % all.length;
      highlight(all[next]);
    }

    // What an option stands for across lists: its link, but the last option ("Every result for ...") links to
    // the search of the text typed, so a new list's one is the same option with a new link.
    function key(option) {
      return option.id === "suggest-all" ? option.id : option.getAttribute("href");
    }

    // A new list: shown while the box has focus and something typed. The option highlighted before it came
    // stays highlighted when the new list has it too (same link, or the every-result option): a list
    // answering a keystroke typed before the arrow keys, or while they were pressed, must not undo them.
    var kept = null;
    document.body.addEventListener("htmx:beforeSwap", function (event) {
      if (event.detail.target !== list) return;
      var current = active();
      kept = current ? key(current) : null;
    });
    document.body.addEventListener("htmx:afterSwap", function (event) {
      if (event.detail.target !== list) return;
      var again = kept ? options().filter(function (el) { return key(el) === kept; })[0] : null;
      kept = null;
      highlight(again || null);
      if (document.activeElement === box && box.value.trim()) open();
      else close();
    });
    // A refused query (too long: 400) or a lost connection: no stale list.
    ["htmx:responseError", "htmx:sendError"].forEach(function (name) {
      document.body.addEventListener(name, function (event) {
        if (event.detail.elt === box) close();
      });
    });

    box.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      var key = event.key;
      if (key === "ArrowDown" || key === "ArrowUp") {
        event.preventDefault();
        move(key === "ArrowDown" ? 1 : -1);
      } else if ((key === "Home" || key === "End") && !list.hidden && active()) {
        event.preventDefault();
        var all = options();
        highlight(key === "Home" ? all[0] : all[all.length - 1]);
      } else if (key === "Enter") {
        var chosen = list.hidden ? null : active();
        if (chosen && chosen.href) {
          event.preventDefault();
          close();
          window.location.assign(chosen.href);
        }
      } else if (key === "Escape" && !list.hidden) {
        event.preventDefault(); // the list closes; the text stays (a second Escape clears the box)
        close();
      }
    });
    box.addEventListener("input", function () {
      if (!box.value.trim()) close();
    });
    box.addEventListener("focus", function () {
      if (box.value.trim()) open();
    });
    box.addEventListener("blur", function () {
      // After a click on an option has followed its link; focus never leaves for the list (mousedown below).
      window.setTimeout(function () {
        if (document.activeElement !== box) close();
      }, 150);
    });
    list.addEventListener("mousedown", function (event) {
      event.preventDefault(); // keep the focus in the box
    });
    list.addEventListener("mousemove", function (event) {
      var option = event.target.closest && event.target.closest('[role="option"]');
      if (option && option !== active()) highlight(option);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
