// The console's only script: served from the image, allowed by script-src 'self' (no inline script anywhere).
// A page whose <main> has data-refresh="N" is read again every N seconds while it is visible, and only its
// <main> is replaced: no full reload, the scroll position and the sign-out form stay. A session that ended
// answers 401: the whole page is loaded again, which shows how to sign in.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var seconds = main ? parseInt(main.getAttribute("data-refresh") || "", 10) : NaN;
  if (!(seconds > 0)) {
    return;
  }
  function refresh() {
    if (document.hidden) {
      return;
    }
    fetch(window.location.href, { headers: { "X-Console-Partial": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) {
          window.location.reload();
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        if (fresh) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
          main.setAttribute("data-refreshed", new Date().toISOString());
        }
      })
      .catch(function () {
        /* the next tick tries again */
      });
  }
  window.setInterval(refresh, seconds * 1000);
})();
