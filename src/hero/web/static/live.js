// hero serve: live updates without a re-render while nothing changes.
// Every few seconds the page asks for itself again with If-None-Match: the ETag it was
// rendered with. The server answers 304 (a few stat calls, no render) until a file the page
// shows changes; then the new page's <main> replaces this one, the open <details> kept open.
// No inline script anywhere (the Content-Security-Policy forbids it): this file is all.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var MAX_PERIOD_MS = 30000;

  function metaEtag(doc) {
    var meta = doc.querySelector('meta[name="hero-etag"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function openDetails() {
    var ids = [];
    document.querySelectorAll("details[open][id]").forEach(function (d) { ids.push(d.id); });
    return ids;
  }

  function start() {
    var main = document.getElementById("live");
    var status = document.getElementById("live-state");
    if (!main || main.getAttribute("data-live") !== "1") return;
    var etag = metaEtag(document);
    var period = PERIOD_MS;
    var timer = null;

    function say(text) { if (status) status.textContent = text; }

    function schedule() {
      if (timer) clearTimeout(timer);
      timer = setTimeout(poll, period);
    }

    function replace(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var next = doc.getElementById("live");
      if (!next) return;
      var keep = openDetails();
      main.innerHTML = next.innerHTML;
      keep.forEach(function (id) {
        var d = document.getElementById(id);
        if (d) d.open = true;
      });
      main.setAttribute("data-live", next.getAttribute("data-live") || "0");
      etag = metaEtag(doc) || etag;
      document.title = doc.title;
    }

    function poll() {
      if (document.hidden) { schedule(); return; }
      var headers = {};
      if (etag) headers["If-None-Match"] = etag;
      fetch(location.pathname + location.search, {
        headers: headers, credentials: "same-origin", cache: "no-store"
      }).then(function (r) {
        if (r.status === 304) return null;
        if (!r.ok) throw new Error("HTTP " + r.status);
        etag = r.headers.get("ETag") || etag;
        return r.text();
      }).then(function (html) {
        if (html !== null) replace(html);
        period = PERIOD_MS;
        say("live");
        if (main.getAttribute("data-live") === "1") schedule(); else say("");
      }).catch(function () {
        period = Math.min(period * 2, MAX_PERIOD_MS);
        say("reconnecting…");
        schedule();
      });
    }

    say("live");
    schedule();
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) { period = PERIOD_MS; schedule(); }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
