// Applies the saved theme before the page paints (loaded without defer).
(function () {
  try {
    var t = localStorage.getItem("reeve-theme");
    if (t === "dark" || t === "light") document.documentElement.setAttribute("data-theme", t);
  } catch (e) { /* storage disabled: the system's theme */ }
})();
