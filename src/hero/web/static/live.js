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

  // The running stories' elapsed time and the daemon's uptime go on counting between two
  // renders, in the browser: the server's clock at render time (data-now) against the
  // browser's, so a skewed clock does not show.
  function duration(s) {
    s = Math.max(0, Math.floor(s));
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor(s % 3600 / 60)) + "m";
    return Math.floor(s / 86400) + "d" + two(Math.floor(s % 86400 / 3600)) + "h";
  }

  var loaded = {};
  function tick() {
    document.querySelectorAll(".ticking[data-started][data-now]").forEach(function (el) {
      var started = parseFloat(el.getAttribute("data-started"));
      var now = parseFloat(el.getAttribute("data-now"));
      if (!isFinite(started) || !isFinite(now)) return;
      var key = el.getAttribute("data-now");
      if (!(key in loaded)) loaded[key] = Date.now() / 1000;
      el.textContent = duration(now - started + (Date.now() / 1000 - loaded[key]));
    });
  }

  function boot() {
    start();
    setInterval(tick, 1000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", boot);
  } else {
    boot();
  }
})();
