// memoryapp: small progressive enhancements. Every page works without this file.
(function () {
  "use strict";

  // Copy buttons: <button data-copy="full value">.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) return;
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });

  // Live character counters: <textarea data-counter="id-of-output" maxlength="200">.
  function count(field) {
    var out = document.getElementById(field.getAttribute("data-counter"));
    var limit = parseInt(field.getAttribute("data-limit"), 10);
    if (!out || !limit) return;
    var left = limit - Array.from(field.value).length; // characters as the server counts them: an emoji is one
    var n = Math.abs(left), chars = n === 1 ? " character" : " characters";
    out.textContent = left >= 0 ? n + chars + " left" : n + chars + " too many";
    out.classList.toggle("over", left < 0);
    field.setAttribute("aria-invalid", left < 0 ? "true" : "false");
  }
  document.addEventListener("input", function (event) {
    if (event.target.matches("[data-counter]")) count(event.target);
  });
  function init(root) {
    root.querySelectorAll("[data-counter]").forEach(count);
    // Buttons that need the clipboard stay hidden without it (no JavaScript, or not a secure context).
    if (navigator.clipboard) {
      root.querySelectorAll("[data-needs-clipboard][hidden]").forEach(function (el) { el.hidden = false; });
    }
  }
  document.addEventListener("DOMContentLoaded", function () { init(document); });
  // Back or Forward to a search: htmx puts back the list it kept, but the box kept the words it had
  // when the page first loaded. The address holds the search that list is for.
  document.addEventListener("htmx:historyRestore", function () {
    var box = document.getElementById("q");
    if (box) box.value = new URLSearchParams(location.search).get("q") || "";
  });
  document.addEventListener("htmx:afterSwap", function (event) { init(event.target); });

  // Focus after a row is swapped (Correct, Delete, Cancel, Save): htmx replaces the element that had
  // focus, which drops it to <body>. It goes to the form's first field, or to the row that changed.
  var swappedId = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    swappedId = target && target.id && target.matches("li.fact") ? target.id : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    if (!swappedId) return;
    // A saved correction is a new fact with a new id: its row carries the "Saved" note.
    var saved = document.querySelector("li.fact .ok-note");
    var row = document.getElementById(swappedId) || (saved && saved.closest("li.fact"));
    swappedId = null;
    if (!row) return;
    var field = row.querySelector("textarea, input:not([type=hidden]), select");
    var button = row.querySelector("form button[type=submit]");
    var menu = row.querySelector("summary");
    if (field) {
      field.focus();
      if (field.setSelectionRange) field.setSelectionRange(field.value.length, field.value.length);
    } else if (button) {
      button.focus();
    } else if (menu) {
      menu.focus();
    } else {
      if (!row.hasAttribute("tabindex")) row.setAttribute("tabindex", "-1");
      row.focus();
    }
  });

  // Escape in a row's correction or delete form cancels it, as its Cancel link does.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var row = event.target.closest && event.target.closest("li.fact.editing, li.fact.confirming");
    var cancel = row && row.querySelector(".actions a[hx-get]");
    if (!cancel) return;
    event.preventDefault();
    cancel.click();
  });

  // An action on something another tab or window already changed (404 gone, 409 decided, 410 used):
  // htmx swaps nothing for an error, so the page would just sit there. Reload it as it is now, with a note.
  var STALE = "memoryapp-stale";
  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr && event.detail.xhr.status;
    if (status !== 404 && status !== 409 && status !== 410) return;
    try { sessionStorage.setItem(STALE, "1"); } catch (e) { /* private mode: reload without the note */ }
    window.location.reload();
  });
  document.addEventListener("DOMContentLoaded", function () {
    var stale = false;
    try { stale = sessionStorage.getItem(STALE) === "1"; sessionStorage.removeItem(STALE); } catch (e) { return; }
    var main = document.getElementById("main");
    if (!stale || !main) return;
    var list = document.createElement("ul");
    list.className = "messages";
    list.setAttribute("role", "status");
    list.innerHTML = '<li class="msg info">That had already changed in another tab or window. This is the page as it is now.</li>';
    main.insertBefore(list, main.firstChild);
  });

  // Per-row menus: opening one closes the others; a click outside closes them all.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.row-menu[open], details.menu[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    });
  });
})();
