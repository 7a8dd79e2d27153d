// Triplet Lab dashboard: live refresh of the parts marked data-live, script-driven forms,
// copy buttons. No inline script (the page's CSP forbids it); everything is delegated from
// the document so that refreshed parts keep working.
"use strict";

(function () {
  // Every 5 s, or ten times as long as the last page took to arrive if that is longer: a
  // large project's page must not keep its server busy for a tab someone left open.
  const REFRESH_MS = 5000;
  let nextDelay = REFRESH_MS;
  const body = document.body;
  const refreshUrl = body.dataset.refresh || "";
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const toast = document.getElementById("toast");
  let toastTimer = null;
  let refreshing = false;

  function say(message, isError) {
    if (!toast) return;
    toast.textContent = message;
    toast.classList.toggle("is-error", Boolean(isError));
    toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { toast.hidden = true; }, 4000);
  }

  async function refresh() {
    if (!refreshUrl || refreshing || document.hidden) return;
    refreshing = true;
    const started = performance.now();
    try {
      const response = await fetch(refreshUrl, {
        headers: { "X-Live": "1" }, credentials: "same-origin", cache: "no-store",
      });
      const landed = new URL(response.url);
      if (landed.pathname + landed.search !== refreshUrl) { window.location.assign(landed.pathname); return; }
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const token = doc.querySelector('meta[name="csrf-token"]');
      if (!token || !token.content) { window.location.assign("/dashboard"); return; }
      document.querySelectorAll("[data-live][id]").forEach(function (old) {
        if (old.contains(document.activeElement) && document.activeElement !== document.body) return;
        const fresh = doc.getElementById(old.id);
        if (fresh && fresh.innerHTML !== old.innerHTML) {
          old.replaceWith(document.importNode(fresh, true));
        }
      });
      body.dataset.refreshed = String(Date.now());
      nextDelay = Math.max(REFRESH_MS, 10 * (performance.now() - started));
    } catch (error) {
      // The server is restarting or the network blinked: try again on the next tick.
    } finally {
      refreshing = false;
    }
  }

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-action")) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { "Accept": "application/json", "X-CSRF-Token": csrf },
        credentials: "same-origin",
      });
      if (response.redirected) { window.location.assign(response.url); return; }
      let payload = {};
      try { payload = await response.json(); } catch (error) { payload = {}; }
      if (!response.ok) {
        say(payload.detail || ("The server answered " + response.status), true);
      } else {
        say("Done.");
      }
      await refresh();
    } catch (error) {
      say("Could not reach the server; nothing was changed.", true);
    } finally {
      if (button && button.isConnected) button.disabled = false;
    }
  });

  document.addEventListener("click", async function (event) {
    const button = event.target instanceof Element ? event.target.closest("[data-copy]") : null;
    if (!button) return;
    const field = document.getElementById(button.dataset.copy);
    if (!field) return;
    try {
      await navigator.clipboard.writeText(field.value);
    } catch (error) {
      field.select();
      document.execCommand("copy");
    }
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  });

  function tick() {
    refresh().finally(function () { setTimeout(tick, nextDelay); });
  }

  if (refreshUrl) {
    setTimeout(tick, REFRESH_MS);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
  }
})();
