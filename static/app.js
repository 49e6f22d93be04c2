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
    var left = limit - field.value.length;
    out.textContent = left >= 0 ? left + " characters left" : -left + " characters too many";
    out.classList.toggle("over", left < 0);
    field.setAttribute("aria-invalid", left < 0 ? "true" : "false");
  }
  document.addEventListener("input", function (event) {
    if (event.target.matches("[data-counter]")) count(event.target);
  });
  function init(root) {
    root.querySelectorAll("[data-counter]").forEach(count);
  }
  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:afterSwap", function (event) { init(event.target); });

  // Per-row menus: opening one closes the others; a click outside closes them all.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.row-menu[open], details.menu[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    });
  });
})();
