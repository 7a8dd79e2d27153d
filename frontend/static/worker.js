// The crowd worker's comparison page: instructions → questions → completion code.
//
// Talks only to the worker API (/api/w/...). Every piece of project or object text is put
// into the page with textContent or attributes, never parsed as HTML. An answer is sent
// once per question token and, when the connection fails, re-sent with the same token and
// the same choice until the server acknowledges it (the API stores a re-sent answer once).
(() => {
  "use strict";

  const config = JSON.parse(document.getElementById("config").textContent);
  const $ = (id) => document.getElementById(id);

  const MTURK_PREVIEW = "ASSIGNMENT_ID_NOT_AVAILABLE";
  const REDIRECT_SECONDS = 3;
  const REQUEST_TIMEOUT_MS = 20000;
  const IMAGE_TIMEOUT_MS = 20000;
  const BACKOFF_FIRST_MS = 500;
  const BACKOFF_MAX_MS = 8000;

  const state = {
    sessionId: null,
    sessionToken: null,
    total: 0,
    answered: 0,
    query: null, // the question on screen
    picks: [], // a ranked grid's picks so far: object indices, most similar first
    shownAt: 0, // performance.now() when it became visible
    busy: true, // true while loading or while an answer is in flight: input is ignored
  };

  // ---- storage (may be unavailable: private windows, third-party iframes) ----------------

  const memoryStore = {};
  function storeGet(key) {
    try {
      return window.localStorage.getItem(key);
    } catch (_) {
      return Object.prototype.hasOwnProperty.call(memoryStore, key) ? memoryStore[key] : null;
    }
  }
  function storeSet(key, value) {
    try {
      window.localStorage.setItem(key, value);
    } catch (_) {
      memoryStore[key] = value;
    }
  }

  function randomId() {
    const bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function anonymousId() {
    const key = "tripletlab.anonymous_id";
    let id = storeGet(key);
    if (!id || !/^[0-9a-f]{32}$/.test(id)) {
      id = randomId();
      storeSet(key, id);
    }
    return id;
  }

  // ---- who is answering: platform parameters from the URL -------------------------------

  function pick(query, names) {
    const params = {};
    for (const name of names) {
      const value = query.get(name);
      if (value) params[name] = value;
    }
    return params;
  }

  function readPlatform() {
    const query = new URLSearchParams(window.location.search);
    if (query.get("preview")) {
      // A researcher's preview from the dashboard: a session of its own on every load,
      // counted nowhere (the server checks the token).
      const id = randomId();
      return { kind: "study-preview", params: { anonymous_id: id, preview: query.get("preview") }, identity: id };
    }
    if (query.get("PROLIFIC_PID")) {
      const params = pick(query, ["PROLIFIC_PID", "STUDY_ID", "SESSION_ID"]);
      return { kind: "prolific", params, identity: params.PROLIFIC_PID };
    }
    if (query.get("assignmentId") || query.get("workerId")) {
      if (query.get("assignmentId") === MTURK_PREVIEW) return { kind: "preview" };
      const params = pick(query, ["workerId", "assignmentId", "hitId", "turkSubmitTo"]);
      return { kind: "mturk", params, identity: `${params.workerId}/${params.assignmentId}` };
    }
    if (query.get("participant")) {
      const participant = query.get("participant");
      return { kind: "link", params: { participant }, identity: participant };
    }
    const id = anonymousId();
    return { kind: "anonymous", params: { anonymous_id: id }, identity: id };
  }

  const platform = readPlatform();
  const startedKey = `tripletlab.started.${config.slug}.${platform.kind}.${platform.identity}`;

  // What resumes this browser's session on a reload: a participant id alone does not (anyone
  // could type it), this random secret, kept by this browser only, does.
  function resumeSecret() {
    const key = `tripletlab.resume.${config.slug}.${platform.kind}.${platform.identity}`;
    let secret = storeGet(key);
    if (!secret || !/^[0-9a-f]{32}$/.test(secret)) {
      secret = randomId();
      storeSet(key, secret);
    }
    return secret;
  }

  // ---- screens, status line, announcements ------------------------------------------------

  const SCREENS = ["intro", "loading", "question", "done", "problem"];
  function showScreen(name) {
    for (const id of SCREENS) $(id).hidden = id !== name;
  }

  let statusTimer = null;
  function setStatus(text, tone) {
    const el = $("status");
    window.clearTimeout(statusTimer);
    el.textContent = text || "";
    el.className = `status${text ? " visible" : ""}${tone ? ` ${tone}` : ""}`;
  }
  function flashStatus(text, tone) {
    setStatus(text, tone);
    statusTimer = window.setTimeout(() => setStatus(""), 4000);
  }

  function announce(text) {
    const el = $("announce");
    el.textContent = "";
    // A fresh text node in a later task makes screen readers speak it even if unchanged.
    window.setTimeout(() => {
      el.textContent = text;
    }, 50);
  }

  function updateProgress() {
    const total = Math.max(state.total, 0);
    const done = Math.min(state.answered, total);
    const bar = $("progressbar");
    bar.setAttribute("aria-valuemax", String(total));
    bar.setAttribute("aria-valuenow", String(done));
    bar.setAttribute("aria-valuetext", `${done} of ${total} answered`);
    $("progress-fill").style.transform = `scaleX(${total ? done / total : 0})`;
    $("progress-text").textContent =
      state.query && done < total ? `Question ${done + 1} of ${total}` : `${done} of ${total} done`;
    $("progress").hidden = total === 0;
  }

  // ---- network: JSON requests that survive a lost connection ------------------------------

  function sleep(ms) {
    // Wakes early when the browser says the connection is back.
    return new Promise((resolve) => {
      const done = () => {
        window.clearTimeout(timer);
        window.removeEventListener("online", done);
        resolve();
      };
      const timer = window.setTimeout(done, ms);
      window.addEventListener("online", done);
    });
  }

  function retryable(status) {
    return status === 0 || status === 408 || status === 429 || status >= 500;
  }

  async function sendOnce(method, url, body, auth) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (auth) headers.Authorization = `Bearer ${state.sessionToken}`;
    const controller = new AbortController();
    const timer = window.setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
    try {
      const response = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
        credentials: "same-origin",
        cache: "no-store",
      });
      let data = {};
      try {
        data = await response.json();
      } catch (_) {
        data = {};
      }
      const retryAfter = Number.parseInt(response.headers.get("Retry-After") || "", 10);
      return {
        status: response.status,
        data: data || {},
        retryAfterMs: Number.isFinite(retryAfter) ? retryAfter * 1000 : 0,
      };
    } catch (_) {
      return { status: 0, data: {}, retryAfterMs: 0 }; // offline, refused, reset, timed out
    } finally {
      window.clearTimeout(timer);
    }
  }

  // The same request (same body: same token, same choice) until the server answers it.
  async function request(method, url, body, { auth = true, what = "" } = {}) {
    let delay = BACKOFF_FIRST_MS;
    let failed = false;
    for (;;) {
      const result = await sendOnce(method, url, body, auth);
      if (!retryable(result.status)) {
        if (failed) flashStatus("Connection restored.", "ok");
        return result;
      }
      failed = true;
      const kept = what ? ` ${what}` : "";
      // 503 and 429 come from a server that is up but busy (a study's launch): it says when
      // to come back (Retry-After), and the worker is told they are waiting, not offline.
      const busy = result.status === 503 || result.status === 429;
      const wait = Math.max(delay, result.retryAfterMs);
      if (busy) {
        setStatus(`Many people are starting right now — retrying in ${Math.ceil(wait / 1000)} s…${kept}`, "warn");
      } else {
        setStatus(`Connection lost — retrying…${kept}`, "warn");
      }
      await sleep(wait);
      delay = Math.min(delay * 2, BACKOFF_MAX_MS);
    }
  }

  function detail(result, fallback) {
    const text = result.data && typeof result.data.detail === "string" ? result.data.detail : "";
    return text || fallback;
  }

  // ---- objects and questions --------------------------------------------------------------

  function loadImage(url, alt) {
    const img = new Image();
    img.alt = alt;
    img.decoding = "async";
    const ready = new Promise((resolve) => {
      const timer = window.setTimeout(() => resolve(false), IMAGE_TIMEOUT_MS);
      const finish = (ok) => {
        window.clearTimeout(timer);
        resolve(ok);
      };
      img.addEventListener("load", () => {
        if (typeof img.decode === "function") {
          img.decode().then(
            () => finish(true),
            () => finish(true),
          );
        } else {
          finish(true);
        }
      });
      img.addEventListener("error", () => finish(false));
    });
    img.src = url;
    return { img, ready };
  }

  // One object's content inside ``container``; returns a promise settled when it is loaded.
  function fillObject(container, obj) {
    let ready = Promise.resolve(true);
    if (obj.image_url) {
      const media = document.createElement("span");
      media.className = "media";
      const { img, ready: loaded } = loadImage(obj.image_url, obj.name);
      media.appendChild(img);
      container.appendChild(media);
      ready = loaded.then((ok) => {
        if (!ok) {
          media.classList.add("broken");
          const note = document.createElement("span");
          note.className = "broken-note";
          note.textContent = "(image did not load)";
          media.appendChild(note);
        }
        return ok;
      });
    }
    if (obj.text || !obj.image_url) {
      const text = document.createElement("span");
      text.className = "text";
      text.textContent = obj.text || obj.name;
      container.appendChild(text);
    }
    return ready;
  }

  // What a screen reader says for an object: its visible text, else its name (the alt).
  function describe(obj) {
    return obj.text || obj.name;
  }

  function card(tag, obj, slot, label) {
    const el = document.createElement(tag);
    el.className = "card";
    el.dataset.index = String(obj.index);
    el.dataset.slot = slot;
    el.setAttribute("aria-label", label);
    const ready = fillObject(el, obj);
    return { el, ready };
  }

  function keyHint(text) {
    const hint = document.createElement("kbd");
    hint.className = "key-hint";
    hint.setAttribute("aria-hidden", "true");
    hint.textContent = text;
    return hint;
  }

  function choiceButton(obj, slot, side, arrow) {
    const { el, ready } = card("button", obj, slot, `${side}: ${describe(obj)}`);
    el.type = "button";
    el.classList.add("choice");
    el.dataset.choice = String(obj.index);
    el.appendChild(keyHint(arrow));
    return { el, ready };
  }

  // What each shape asks; a project's own wording where it has one (triplet, pair).
  function wordingOf(query) {
    switch (query.kind) {
      case "triplet":
        return config.question;
      case "pair":
        return config.pair_question;
      case "odd_one_out":
        return config.odd_one_out_question || "Which one does not belong?";
      case "rank":
        if (config.rank_question) return config.rank_question.replace("{k}", String(query.k));
        return query.k === 1
          ? "Which one is most similar to the top one?"
          : `Pick the ${query.k} most similar to the top one, in order`;
      default:
        return config.question;
    }
  }

  function ordinal(n) {
    const tens = n % 100;
    if (tens >= 11 && tens <= 13) return `${n}th`;
    return `${n}${{ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th"}`;
  }

  function anchorCard(obj) {
    const anchor = card("div", obj, "anchor", `Top: ${describe(obj)}`);
    anchor.el.classList.add("anchor");
    anchor.el.setAttribute("role", "img");
    return anchor;
  }

  function tripletQuestion(root, objects, ready) {
    const anchor = anchorCard(objects[0]);
    const candidates = document.createElement("div");
    candidates.className = "candidates";
    const left = choiceButton(objects[1], "left", "Left", "←");
    const right = choiceButton(objects[2], "right", "Right", "→");
    candidates.append(left.el, right.el);
    root.append(anchor.el, candidates);
    ready.push(anchor.ready, left.ready, right.ready);
  }

  function pairQuestion(root, objects, ready) {
    const pair = document.createElement("div");
    pair.className = "pair";
    const left = card("div", objects[0], "left-object", `Left: ${describe(objects[0])}`);
    const right = card("div", objects[1], "right-object", `Right: ${describe(objects[1])}`);
    for (const c of [left, right]) c.el.setAttribute("role", "img");
    pair.append(left.el, right.el);
    const buttons = document.createElement("div");
    buttons.className = "pair-buttons";
    const specs = [
      [-1, "left", "← Left", "Left is better"],
      [0, "same", "↓ About the same", "They are about the same"],
      [1, "right", "Right →", "Right is better"],
    ];
    for (const [choice, slot, text, label] of specs) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = `choice pair-choice ${slot}`;
      button.dataset.choice = String(choice);
      button.dataset.slot = slot;
      button.setAttribute("aria-label", label);
      button.textContent = text;
      buttons.appendChild(button);
    }
    root.append(pair, buttons);
    ready.push(left.ready, right.ready);
  }

  // Three equal tiles; the chosen one is the odd one out (keys 1–3).
  function oddOneOutQuestion(root, objects, ready) {
    const tiles = document.createElement("div");
    tiles.className = "odd-tiles";
    objects.forEach((obj, i) => {
      const slot = String(i + 1);
      const tile = choiceButton(obj, slot, `${slot} of ${objects.length}`, slot);
      tiles.appendChild(tile.el);
      ready.push(tile.ready);
    });
    root.appendChild(tiles);
  }

  // ---- ranked grid: an anchor, n candidates, the k most similar picked in order --------

  function rankLabel(button, picked) {
    const base = `${button.dataset.slot}: ${button.dataset.describe}`;
    return picked ? `${base}, your ${ordinal(picked)} pick` : base;
  }

  function rankQuestion(root, query, ready) {
    const objects = query.objects;
    const n = objects.length - 1;
    const k = query.k;
    const hint = document.createElement("p");
    hint.className = "rank-hint";
    hint.id = "rank-hint";
    hint.textContent =
      k === 1
        ? "Tap it, then Submit. Tap it again to undo."
        : "Most similar first. Tap one again to undo it.";
    const anchor = anchorCard(objects[0]);
    const grid = document.createElement("div");
    grid.className = "rank-grid";
    grid.dataset.n = String(n);
    grid.setAttribute("role", "group");
    grid.setAttribute("aria-label", `${n} candidates`);
    grid.setAttribute("aria-describedby", "rank-hint");
    objects.slice(1).forEach((obj, i) => {
      const slot = String(i + 1);
      const tile = card("button", obj, slot, "");
      const button = tile.el;
      button.type = "button";
      button.classList.add("choice", "rank-choice");
      button.dataset.choice = String(obj.index);
      button.dataset.action = "pick";
      button.dataset.describe = describe(obj);
      button.setAttribute("aria-pressed", "false");
      button.setAttribute("aria-label", rankLabel(button, 0));
      if (n <= 9) button.appendChild(keyHint(slot));
      const badge = document.createElement("span");
      badge.className = "rank-badge";
      badge.setAttribute("aria-hidden", "true");
      button.appendChild(badge);
      grid.appendChild(button);
      ready.push(tile.ready);
    });
    const bar = document.createElement("div");
    bar.className = "rank-bar";
    const count = document.createElement("span");
    count.className = "rank-count";
    count.id = "rank-count";
    count.setAttribute("aria-hidden", "true");
    const submit = document.createElement("button");
    submit.type = "button";
    submit.className = "primary rank-submit";
    submit.id = "rank-submit";
    submit.dataset.action = "submit";
    submit.dataset.slot = "submit";
    bar.append(count, submit);
    root.append(hint, anchor.el, grid, bar);
  }

  // A grid's picks outlive a reload of the tab (a phone's pull-to-refresh), per question.
  function picksKey(query) {
    return `tripletlab.picks.${query.token}`;
  }
  function savePicks() {
    try {
      window.sessionStorage.setItem(picksKey(state.query), JSON.stringify(state.picks));
    } catch (_) {
      /* no storage: the picks live as long as the page */
    }
  }
  function forgetPicks(query) {
    try {
      window.sessionStorage.removeItem(picksKey(query));
    } catch (_) {
      /* nothing was kept */
    }
  }
  function savedPicks(query) {
    try {
      const saved = JSON.parse(window.sessionStorage.getItem(picksKey(query)) || "[]");
      const shown = new Set(query.objects.slice(1).map((o) => o.index));
      const picks = Array.isArray(saved) ? saved.filter((i) => shown.has(i)) : [];
      return [...new Set(picks)].slice(0, query.k);
    } catch (_) {
      return [];
    }
  }

  // Shows the picks (numbers on the tiles, labels, the Submit button) as state.picks says.
  function renderPicks() {
    savePicks();
    const section = $("question");
    const k = state.query.k;
    for (const button of section.querySelectorAll("button.rank-choice")) {
      const rank = state.picks.indexOf(Number(button.dataset.choice)) + 1;
      button.setAttribute("aria-pressed", rank ? "true" : "false");
      button.setAttribute("aria-label", rankLabel(button, rank));
      button.classList.toggle("picked", rank > 0);
      button.querySelector(".rank-badge").textContent = rank ? String(rank) : "";
    }
    section.querySelector(".rank-grid").classList.toggle("full", state.picks.length >= k);
    const left = k - state.picks.length;
    const submit = $("rank-submit");
    submit.setAttribute("aria-disabled", left > 0 ? "true" : "false");
    submit.textContent = left > 0 ? `Pick ${left} more` : "Submit";
    $("rank-count").textContent = `${state.picks.length} of ${k} picked`;
  }

  function togglePick(button) {
    if (state.busy || !state.query || state.query.kind !== "rank") return;
    const index = Number(button.dataset.choice);
    const at = state.picks.indexOf(index);
    const k = state.query.k;
    if ($("status").classList.contains("pick-note")) setStatus("");
    if (at >= 0) {
      state.picks.splice(at, 1); // later picks move up one rank
      renderPicks();
      announce(`Undone: ${button.dataset.describe}. ${state.picks.length} of ${k} picked.`);
      return;
    }
    if (state.picks.length >= k) {
      flashStatus(`You have picked ${k}. Tap a picked one to undo it, or Submit.`, "warn pick-note");
      announce(`You have picked ${k} already. Undo one first, or submit.`);
      return;
    }
    state.picks.push(index);
    renderPicks();
    const done = state.picks.length === k;
    announce(
      `${ordinal(state.picks.length)}: ${button.dataset.describe}.` +
        (done ? " All picked: press Submit or Enter." : ` ${state.picks.length} of ${k} picked.`),
    );
    // The last pick hands focus to Submit (a keyboard's Enter then sends).
    const focused = document.activeElement;
    if (done && (!focused || focused === document.body || $("question").contains(focused))) {
      $("rank-submit").focus({ preventScroll: true });
    }
  }

  function submitPicks() {
    if (state.busy || !state.query || state.query.kind !== "rank") return;
    const left = state.query.k - state.picks.length;
    if (left > 0) {
      flashStatus(`Pick ${left} more first.`, "warn pick-note");
      announce(`Pick ${left} more first.`);
      return;
    }
    answer(state.picks.slice(), $("rank-submit"));
  }

  // Builds the question off-screen; resolves once every image is decoded.
  async function buildQuestion(query) {
    const root = document.createDocumentFragment();
    const wording = document.createElement("h2");
    wording.className = "wording";
    wording.id = "question-wording";
    wording.textContent = wordingOf(query);
    root.appendChild(wording);
    const ready = [];
    if (query.kind === "triplet") tripletQuestion(root, query.objects, ready);
    else if (query.kind === "odd_one_out") oddOneOutQuestion(root, query.objects, ready);
    else if (query.kind === "rank") rankQuestion(root, query, ready);
    else pairQuestion(root, query.objects, ready);
    await Promise.all(ready);
    return root;
  }

  function setBusy(busy) {
    state.busy = busy;
    const section = $("question");
    section.classList.toggle("busy", busy);
    section.setAttribute("aria-busy", busy ? "true" : "false");
    for (const button of section.querySelectorAll("button.choice")) {
      button.setAttribute("aria-disabled", busy ? "true" : "false");
    }
  }

  // Replaces the question on screen in one step, keeping keyboard focus on the same slot.
  function swapQuestion(content, query) {
    const section = $("question");
    const focused = document.activeElement;
    const slot = focused && section.contains(focused) ? focused.dataset.slot : null;
    section.replaceChildren(content);
    section.dataset.kind = query.kind;
    section.dataset.token = query.token;
    showScreen("question");
    if (slot === "submit") {
      // A grid was just sent: start the next one from its question, not from its Submit.
      section.focus({ preventScroll: true });
    } else if (slot) {
      const same = section.querySelector(`[data-slot="${slot}"]`);
      if (same) same.focus({ preventScroll: true });
    }
  }

  // ---- the flow -------------------------------------------------------------------------

  function sessionUrl(path) {
    return `${config.sessions_api}/${encodeURIComponent(state.sessionId)}/${path}`;
  }

  async function startSession() {
    setBusy(true);
    $("intro-error").hidden = true;
    $("start").disabled = true;
    const preview = platform.kind === "study-preview"; // nothing kept: a fresh session each load
    const body = preview ? { ...platform.params } : { ...platform.params, resume_secret: resumeSecret() };
    const result = await request("POST", `${config.api}/sessions`, body, {
      auth: false,
    });
    $("start").disabled = false;
    if (result.status !== 201 && result.status !== 200) {
      showScreen("intro");
      $("intro-error").textContent = detail(result, "The study could not be started.");
      $("intro-error").hidden = false;
      $("start").hidden = false;
      return;
    }
    const data = result.data;
    state.sessionId = data.session_id;
    state.sessionToken = data.session_token;
    state.total = Number(data.total) || 0;
    state.answered = Number(data.answered) || 0;
    if (!preview) storeSet(startedKey, "1");
    updateProgress();
    if ($("question").hidden) showScreen("loading");
    await loadNext();
  }

  const LOADING_TEXT = "Loading the next question…";

  // `next`: the next question as the answer's reply carried it (one request per question);
  // without it (on load, on resume, after a refused answer) it is asked for.
  async function loadNext(next) {
    setBusy(true);
    // Say so when the next question is slow to arrive (a slow line, large images).
    const slow = window.setTimeout(() => {
      if (!$("status").textContent) setStatus(LOADING_TEXT);
    }, 1500);
    try {
      await showNext(next);
    } finally {
      window.clearTimeout(slow);
      if ($("status").textContent === LOADING_TEXT) setStatus("");
    }
  }

  async function showNext(next) {
    let data = next && typeof next === "object" && ("query" in next || "done" in next) ? next : null;
    if (!data) {
      const result = await request("GET", sessionUrl("next"), undefined, {
        what: "Your answers so far are saved.",
      });
      if (result.status === 401 || result.status === 403) return showSuperseded();
      if (result.status !== 200) {
        const text = detail(result, "The next question could not be loaded.");
        return showProblem(text, "Try again", () => loadNext());
      }
      data = result.data;
    }
    if (data.done) return showDone(data);
    if (data.paused) return showPaused(data);
    if (data.wait || !data.query) return showWait(data);
    const query = data.query;
    if (query.total) state.total = Number(query.total);
    if (query.kind === "rank") {
      const n = query.objects.length - 1;
      query.k = Math.min(Math.max(Math.trunc(Number(query.k)) || 1, 1), Math.max(n - 1, 1));
    }
    const content = await buildQuestion(query);
    state.query = query;
    state.picks = query.kind === "rank" ? savedPicks(query) : [];
    swapQuestion(content, query);
    if (query.kind === "rank") renderPicks();
    updateProgress();
    const number = Math.min(state.answered + 1, state.total || state.answered + 1);
    announce(`Question ${number} of ${state.total}. ${wordingOf(query)}`);
    // The question goes on screen only once all its images are decoded (buildQuestion waits
    // for them), so the clock starts at the frame that shows the last image loaded: the one
    // way the page measures an answer's time, for every shape.
    window.requestAnimationFrame(() => {
      state.shownAt = performance.now();
      setBusy(false);
    });
  }

  async function answer(choice, button) {
    const query = state.query;
    if (state.busy || !query) return;
    const clientMs = Math.max(0, Math.round(performance.now() - state.shownAt));
    setBusy(true);
    if (button) button.classList.add("chosen");
    const result = await request(
      "POST",
      sessionUrl("answers"),
      { token: query.token, choice, client_ms: clientMs },
      { what: "Your answer is kept and will count once." },
    );
    if (result.status === 401 || result.status === 403) return showSuperseded();
    if (query.kind === "rank") forgetPicks(query);
    let next = null;
    if (result.status === 200 || result.status === 201) {
      state.answered = Number(result.data.answered);
      if (result.data.total) state.total = Number(result.data.total);
      next = result.data.next || null;
      updateProgress();
    } else if (result.status !== 409) {
      // e.g. the question expired: say so, then show whatever the server asks next.
      flashStatus(detail(result, "That answer was not accepted."), "warn");
    }
    state.query = null;
    await loadNext(next);
  }

  function safeUrl(url) {
    if (!url) return null;
    try {
      const parsed = new URL(url, window.location.href);
      return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
    } catch (_) {
      return null;
    }
  }

  function countdown(seconds, render, then) {
    let left = seconds;
    render(left);
    const timer = window.setInterval(() => {
      left -= 1;
      if (left > 0) {
        render(left);
      } else {
        window.clearInterval(timer);
        then();
      }
    }, 1000);
  }

  function showDone(data) {
    state.query = null;
    setBusy(true);
    const code = typeof data.completion_code === "string" ? data.completion_code : "";
    if (code) state.answered = Math.max(state.answered, state.total);
    updateProgress();
    $("done-title").textContent = code ? "All done" : data.paused ? "Paused" : "Nothing to answer right now";
    $("retry-block").hidden = !data.paused;
    $("done").classList.toggle("no-code", !code);
    $("done-message").textContent = data.message || "You have answered every question.";
    $("completion-code").textContent = code;
    $("code-block").hidden = !code;
    showScreen("done");
    $("done-title").focus({ preventScroll: true });
    announce(
      code ? `Finished. Your completion code is ${code}.` : data.paused ? "The study is paused." : "Finished.",
    );

    const submit = data.mturk_submit;
    const submitUrl = submit ? safeUrl(submit.url) : null;
    if (submitUrl) {
      const form = $("mturk-form");
      form.action = submitUrl;
      $("mturk-assignment").value = submit.assignmentId || platform.params.assignmentId || "";
      $("mturk-code").value = code;
      form.hidden = false;
      countdown(
        REDIRECT_SECONDS,
        (s) => {
          $("mturk-text").textContent = `Submitting your HIT to Mechanical Turk in ${s} s…`;
        },
        () => {
          $("mturk-text").textContent = "Submitting your HIT…";
          form.submit();
        },
      );
      return;
    }
    const redirect = safeUrl(data.redirect_url);
    if (redirect) {
      $("redirect-link").href = redirect;
      $("redirect-note").hidden = false;
      countdown(
        REDIRECT_SECONDS,
        (s) => {
          $("redirect-text").textContent = `Taking you back to the study platform in ${s} s…`;
        },
        () => {
          $("redirect-text").textContent = "Taking you back to the study platform…";
          window.location.assign(redirect);
        },
      );
    }
  }

  // The study is paused (or not launched yet): the worker keeps their session; the page
  // says so, offers to try again, and asks again by itself now and then.
  function showPaused(data) {
    showDone(data);
    const seconds = Math.min(Math.max(Number(data.retry_after) || 30, 5), 300);
    window.setTimeout(() => {
      if (!$("done").hidden && !$("retry-block").hidden) loadNext();
    }, seconds * 1000);
  }

  // Nothing to ask right now, but the study goes on (its next questions wait for answers
  // others are giving): a short pause, then the page asks again by itself.
  async function showWait(data) {
    const seconds = Math.min(Math.max(Number(data.retry_after) || 3, 1), 60);
    state.query = null;
    $("loading-text").textContent =
      data.message || "The next questions are being prepared.";
    $("loading-detail").textContent = `The next one will appear by itself in a few seconds.`;
    $("loading-detail").hidden = false;
    showScreen("loading");
    announce("Please wait a moment: the next question is being prepared.");
    await sleep(seconds * 1000);
    $("loading-text").textContent = "Loading…";
    $("loading-detail").hidden = true;
    return showNext(null);
  }

  function showProblem(text, action, handler) {
    setBusy(true);
    $("problem-text").textContent = text;
    const button = $("problem-action");
    button.textContent = action;
    button.onclick = () => {
      showScreen("loading");
      handler();
    };
    showScreen("problem");
    $("problem-title").focus({ preventScroll: true });
  }

  function showSuperseded() {
    showProblem(
      "This study was opened in another tab or window, so this one has paused. " +
        "Your answers so far are saved; you can continue here instead.",
      "Continue here",
      startSession,
    );
  }

  async function copyCode() {
    const code = $("completion-code").textContent;
    try {
      await navigator.clipboard.writeText(code);
    } catch (_) {
      const range = document.createRange();
      range.selectNodeContents($("completion-code"));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      try {
        document.execCommand("copy");
      } catch (__) {
        /* the code stays selected for the worker to copy */
      }
    }
    flashStatus("Completion code copied.", "ok");
  }

  // ---- input --------------------------------------------------------------------------

  const KEYS = {
    triplet: { ArrowLeft: "left", ArrowRight: "right" },
    pair: { ArrowLeft: "left", ArrowDown: "same", ArrowRight: "right" },
    odd_one_out: { 1: "1", 2: "2", 3: "3" },
  };

  function onKey(event) {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if (!state.query || $("question").hidden) return;
    if (state.query.kind === "rank") return onRankKey(event);
    const slot = (KEYS[state.query.kind] || {})[event.key];
    if (!slot) return;
    event.preventDefault();
    if (event.repeat || state.busy) return;
    const button = $("question").querySelector(`button[data-slot="${slot}"]`);
    if (button) answer(Number(button.dataset.choice), button);
  }

  // A grid: 1–9 pick or unpick that candidate, Backspace undoes the last pick, Enter sends
  // (a focused candidate keeps Enter for itself, as a button does).
  function onRankKey(event) {
    const section = $("question");
    if (/^[1-9]$/.test(event.key)) {
      const button = section.querySelector(`button.rank-choice[data-slot="${event.key}"]`);
      if (!button) return;
      event.preventDefault();
      if (!event.repeat) togglePick(button);
    } else if (event.key === "Backspace") {
      event.preventDefault();
      const last = state.picks[state.picks.length - 1];
      const button = section.querySelector(`button.rank-choice[data-choice="${last}"]`);
      if (last !== undefined && button && !event.repeat) togglePick(button);
    } else if (event.key === "Enter") {
      const focused = document.activeElement;
      if (focused && focused.matches("button") && focused.id !== "rank-submit") return;
      event.preventDefault();
      if (!event.repeat) submitPicks();
    }
  }

  function onClick(event) {
    const button = event.target.closest("button.choice, button[data-action]");
    if (!button || !$("question").contains(button)) return;
    if (button.dataset.action === "pick") togglePick(button);
    else if (button.dataset.action === "submit") submitPicks();
    else answer(Number(button.dataset.choice), button);
  }

  // ---- start ----------------------------------------------------------------------------

  const CLOSED = {
    draft: "This study has not started yet. Please come back later.",
    paused: "This study is paused for now. Please come back later.",
    stopped: "This study has ended and takes no more answers. Thank you for your interest!",
  };

  async function checkAccepting() {
    const result = await sendOnce("GET", config.api, undefined, false);
    if (result.status === 200 && result.data.accepting === false) {
      $("closed-note").textContent = CLOSED[result.data.status] || $("closed-note").textContent;
      $("closed-note").hidden = false;
      $("start").hidden = true;
    }
  }

  function init() {
    document.addEventListener("keydown", onKey);
    $("question").addEventListener("click", onClick);
    $("copy-code").addEventListener("click", copyCode);
    $("retry").addEventListener("click", () => {
      $("retry-block").hidden = true;
      showScreen("loading");
      loadNext();
    });
    $("start").addEventListener("click", () => {
      $("start").hidden = true;
      showScreen("loading");
      startSession();
    });

    if (platform.kind === "preview") {
      // A Mechanical Turk preview: show what the task is like, ask the server for nothing.
      $("preview-note").hidden = false;
      $("start").hidden = true;
      showScreen("intro");
      return;
    }
    if (platform.kind === "study-preview") {
      $("study-preview-note").hidden = false;
      showScreen("intro");
      $("start").hidden = false; // served before launch too: no check of the study's status
      return;
    }
    if (storeGet(startedKey)) {
      // A reload (or a return visit): resume the same session, same open question.
      showScreen("loading");
      startSession();
      return;
    }
    showScreen("intro");
    $("start").hidden = false;
    checkAccepting();
  }

  init();
})();
