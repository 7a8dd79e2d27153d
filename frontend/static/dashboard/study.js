// Triplet Lab dashboard: setting up and running a study. Forms and buttons call the
// researcher API with the dashboard's session (its cookie) and CSRF token; a refusal is
// shown beside the field its `loc` names. Uploads show their progress; the plan builder's
// form is generated from the plan's JSON schema and the strategy registry the page embeds.
// No inline script (the page's CSP forbids it); events are delegated from the document.
"use strict";

(function () {
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const FLASH_KEY = "tripletlab.flash";

  // ---- talking to the API ---------------------------------------------------------------

  async function api(method, url, body) {
    const headers = { Accept: "application/json", "X-CSRF-Token": csrf };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (error) {
      return { status: 0, data: { detail: "Could not reach the server; nothing was changed." } };
    }
    let data = {};
    if (response.status !== 204) {
      try { data = await response.json(); } catch (error) { data = {}; }
    }
    if (response.status === 401) {
      data = { detail: "Your dashboard session ended: reload the page and sign in again." };
    }
    return { status: response.status, data: data || {} };
  }

  function say(message, isError) {
    const toast = document.getElementById("toast");
    if (!toast) return;
    toast.textContent = message;
    toast.classList.toggle("is-error", Boolean(isError));
    toast.hidden = false;
    window.setTimeout(function () { toast.hidden = true; }, 4000);
  }

  // A message shown after the page reloads (what was just done).
  function reloadWith(message, url) {
    try { window.sessionStorage.setItem(FLASH_KEY, message); } catch (error) { /* no storage */ }
    if (url) window.location.assign(url); else window.location.reload();
  }

  // Replace the page's elements ``ids`` with the server's fresh copies (no reload: what is
  // on screen, an upload's progress say, stays).
  async function refreshParts(ids) {
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      ids.forEach(function (id) {
        const old = document.getElementById(id);
        const fresh = doc.getElementById(id);
        if (old && fresh) old.replaceWith(document.importNode(fresh, true));
      });
    } catch (error) {
      // The next visit shows it.
    }
  }

  function flash() {
    let message = null;
    try {
      message = window.sessionStorage.getItem(FLASH_KEY);
      window.sessionStorage.removeItem(FLASH_KEY);
    } catch (error) { message = null; }
    if (message) say(message);
  }

  // ---- errors beside their fields ---------------------------------------------------------

  function clearErrors(root) {
    root.querySelectorAll(".field-error").forEach(function (el) { el.remove(); });
    root.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
    root.querySelectorAll(".has-error").forEach(function (el) { el.classList.remove("has-error"); });
    const top = root.querySelector(".form-error");
    if (top) { top.hidden = true; top.textContent = ""; }
  }

  // The element a `loc` names: the field of that path, else of the nearest path above it.
  function fieldFor(root, loc) {
    const parts = loc.filter(function (part) { return part !== "body"; }).map(String);
    for (let n = parts.length; n > 0; n -= 1) {
      const path = parts.slice(0, n).join(".");
      const found = root.querySelector('[data-path="' + CSS.escape(path) + '"]');
      if (found) return found;
    }
    return null;
  }

  function showErrors(root, data, status) {
    clearErrors(root);
    let detail = typeof data.detail === "string" ? data.detail : ("The server answered " + status);
    const errors = Array.isArray(data.errors) ? data.errors : [];
    const placed = errors.map(function (error) {
      return fieldFor(root, Array.isArray(error.loc) ? error.loc : []);
    });
    if (errors.length && placed.every(Boolean)) {
      detail = errors.length === 1 ? "Please correct the field marked below."
        : "Please correct the " + errors.length + " fields marked below.";
    }
    const top = root.querySelector(".form-error");
    if (top) { top.textContent = detail; top.hidden = false; } else { say(detail, true); }
    let first = null;
    errors.forEach(function (error, i) {
      const field = placed[i];
      if (!field) return;
      const note = document.createElement("p");
      note.className = "field-error";
      note.setAttribute("role", "alert");
      // Beside its field the message need not say which strategy (the card does, from 1).
      note.textContent = String(error.msg || "").replace(/^Value error, /, "")
        .replace(/^strategy \d+ \([^)]*\): /, "");
      field.classList.add("has-error");
      field.appendChild(note);
      const control = field.matches("input, select, textarea") ? field : field.querySelector("input, select, textarea");
      if (control) control.setAttribute("aria-invalid", "true");
      if (!first) first = field;
    });
    (first || top || root).scrollIntoView({ block: "center", behavior: "smooth" });
  }

  // ---- forms that call the API ------------------------------------------------------------

  function formBody(form) {
    const body = {};
    const nulls = form.hasAttribute("data-nulls");
    form.querySelectorAll("input[name], select[name], textarea[name]").forEach(function (control) {
      if (control.type === "hidden" || control.name === "confirm") return;
      let value = control.type === "checkbox" ? control.checked : control.value;
      if (typeof value === "string" && value.trim() === "") {
        if (control.hasAttribute("data-optional")) return;
        if (nulls) { body[control.name] = null; return; }
      }
      if (control.type === "number" && value !== "") {
        const number = Number(value);
        value = Number.isFinite(number) ? number : value;
      }
      body[control.name] = value;
    });
    return body;
  }

  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, function (_, name) {
      return encodeURIComponent(values[name] === undefined ? "" : values[name]);
    });
  }

  document.addEventListener("submit", async function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-api")) return;
    event.preventDefault();
    const [method, url] = form.dataset.api.split(" ");
    const body = form.dataset.send === "none" ? undefined : formBody(form);
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    const result = await api(method, url, body);
    if (button) button.disabled = false;
    if (result.status >= 200 && result.status < 300) {
      const then = form.dataset.then;
      if (form.dataset.refresh) {
        await refreshParts(form.dataset.refresh.split(" "));
        say(form.dataset.done || "Saved.");
        return;
      }
      reloadWith(form.dataset.done || "Saved.", then ? fill(then, Object.assign({}, body, result.data)) : null);
      return;
    }
    showErrors(form, result.data, result.status);
  });

  // A field that must hold an exact text (a deletion's confirmation) before its form goes.
  document.addEventListener("input", function (event) {
    const control = event.target;
    const marked = control instanceof Element ? control.closest(".field.has-error") : null;
    if (marked) { // edited: its refusal no longer speaks for what it holds
      marked.classList.remove("has-error");
      marked.querySelectorAll(".field-error").forEach(function (el) { el.remove(); });
      control.removeAttribute("aria-invalid");
    }
    if (control instanceof HTMLInputElement && control.dataset.mustEqual !== undefined) {
      const button = control.form && control.form.querySelector("button[type=submit]");
      if (button) button.disabled = control.value.trim() !== control.dataset.mustEqual;
    }
    if (control instanceof HTMLInputElement && control.hasAttribute("data-slug-source")) {
      const slug = control.form && control.form.querySelector("[data-slug]");
      if (slug && !slug.dataset.edited) {
        slug.value = control.value.toLowerCase().normalize("NFKD").replace(/[\u0300-\u036f]/g, "")
          .replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 63);
      }
    }
    if (control instanceof HTMLInputElement && control.hasAttribute("data-slug")) {
      control.dataset.edited = "1";
    }
  });

  // Buttons that POST to the API (launch, pause, resume, stop).
  document.addEventListener("click", async function (event) {
    const button = event.target instanceof Element ? event.target.closest("[data-api-post]") : null;
    if (!button) return;
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    const result = await api("POST", button.dataset.apiPost);
    button.disabled = false;
    if (result.status >= 200 && result.status < 300) {
      const status = result.data.status || "";
      reloadWith(status ? "The study is " + status.replace("draft", "not launched") + "." : "Done.");
      return;
    }
    showErrors(button.closest("section") || document.body, result.data, result.status);
  });

  // ---- uploads by drag and drop -----------------------------------------------------------

  function uploadOne(zone, file) {
    const status = document.getElementById("upload-status");
    const fillBar = document.getElementById("upload-fill");
    const bar = document.getElementById("upload-bar");
    const percent = document.getElementById("upload-percent");
    const done = document.getElementById("upload-done");
    const failed = document.getElementById("upload-error");
    status.hidden = false;
    done.hidden = true;
    failed.hidden = true;
    document.getElementById("upload-name").textContent = file.name;
    function progress(share, text) {
      const value = Math.round(share * 100);
      fillBar.style.width = value + "%";
      bar.setAttribute("aria-valuenow", String(value));
      percent.textContent = text || value + "%";
    }
    progress(0);
    return new Promise(function (resolve) {
      const request = new XMLHttpRequest();
      request.open("POST", zone.dataset.upload);
      request.setRequestHeader("X-CSRF-Token", csrf);
      request.setRequestHeader("Accept", "application/json");
      let body;
      if (/\.json$/i.test(file.name) || file.type === "application/json") {
        request.setRequestHeader("Content-Type", "application/json");
        body = file; // the API reads a JSON list as the request's body
      } else {
        body = new FormData();
        body.append("file", file, file.name);
      }
      request.upload.addEventListener("progress", function (e) {
        if (e.lengthComputable) progress(e.loaded / e.total);
      });
      request.upload.addEventListener("load", function () {
        progress(1, "100% — the server is reading it…");
      });
      request.addEventListener("load", function () {
        let data = {};
        try { data = JSON.parse(request.responseText); } catch (error) { data = {}; }
        if (request.status === 201) {
          progress(1, "done");
          status.classList.remove("failed");
          const count = Number(data.count || 0);
          done.textContent = "Added " + count.toLocaleString("en") + (count === 1 ? " object" : " objects") +
            " from " + file.name + ".";
          done.hidden = false;
          resolve(true);
          return;
        }
        status.classList.add("failed");
        percent.textContent = "refused";
        document.getElementById("upload-detail").textContent =
          (typeof data.detail === "string" ? data.detail : "The server answered " + request.status) +
          (request.status === 413 ? "" : "");
        const list = document.getElementById("upload-errors");
        list.replaceChildren();
        (Array.isArray(data.errors) ? data.errors : []).forEach(function (error) {
          const item = document.createElement("li");
          const where = (error.loc || []).filter(function (p) { return p !== "body"; }).join(" › ");
          item.textContent = (where ? where + ": " : "") + error.msg;
          list.appendChild(item);
        });
        failed.hidden = false;
        resolve(false);
      });
      request.addEventListener("error", function () {
        status.classList.add("failed");
        document.getElementById("upload-detail").textContent = "The upload did not reach the server; nothing was added.";
        document.getElementById("upload-errors").replaceChildren();
        failed.hidden = false;
        resolve(false);
      });
      request.send(body);
    });
  }

  async function uploadAll(zone, files) {
    let added = 0;
    for (const file of files) {
      if (!(await uploadOne(zone, file))) return; // the refusal stays on screen
      added += 1;
    }
    if (added) await refreshParts(["objects", "project-facts"]);
  }

  function setUpDropzone(zone) {
    const input = document.getElementById("upload-file");
    ["dragenter", "dragover"].forEach(function (name) {
      zone.addEventListener(name, function (event) {
        event.preventDefault();
        zone.classList.add("dragging");
      });
    });
    ["dragleave", "dragend"].forEach(function (name) {
      zone.addEventListener(name, function () { zone.classList.remove("dragging"); });
    });
    zone.addEventListener("drop", function (event) {
      event.preventDefault();
      zone.classList.remove("dragging");
      const files = Array.from((event.dataTransfer && event.dataTransfer.files) || []);
      if (files.length) uploadAll(zone, files);
    });
    zone.addEventListener("keydown", function (event) {
      if (event.target === zone && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        input.click();
      }
    });
    input.addEventListener("change", function () {
      const files = Array.from(input.files || []);
      input.value = "";
      if (files.length) uploadAll(zone, files);
    });
  }

  // ---- the plan builder ---------------------------------------------------------------------

  const ADVANCED = new Set(["quality"]); // shown folded
  const SKIPPED = new Set(["status"]); // the study's status: launched, paused and stopped elsewhere

  // Labels that say more than the field's name does.
  const LABELS = {
    mturk: "Runs on Mechanical Turk",
    gold_rate: "Attention checks (gold rate)",
    repeat_rate: "Repeats (rate)",
    min_answer_ms: "Minimum answer time (ms)",
    redirect_url: "Redirect when done (URL)",
    queries_per_session: "Questions per session",
    redundancy: "Answers per question",
    answers: "After this many answers",
    kind: "Kind",
    n_landmarks: "Number of landmarks",
  };

  // Labels of one field in particular (by its path; the same name reads otherwise there).
  const PATH_LABELS = {
    "stop.answers": "After this many answers",
    "stop.kind": "Or when this model kind",
    "stop.target": "reaches this figure",
    "stop.metric": "Figure (default: its main one)",
  };

  function humanize(name, path) {
    if (path && PATH_LABELS[path]) return PATH_LABELS[path];
    if (LABELS[name]) return LABELS[name];
    const text = String(name).replace(/_/g, " ").replace(/\bms\b/, "(ms)").replace(/\burl\b/, "URL");
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  function element(tag, attributes, text) {
    const el = document.createElement(tag);
    Object.entries(attributes || {}).forEach(function ([name, value]) {
      if (value === null || value === undefined || value === false) return;
      el.setAttribute(name, value === true ? "" : String(value));
    });
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function Builder(form, schema, current) {
    const defs = schema.plan.$defs || {};
    const kinds = {};
    schema.strategies.forEach(function (s) { kinds[s.kind] = s; });
    const root = form.querySelector("#builder-fields");
    const jsonView = document.getElementById("plan-json");
    let ids = 0;

    function resolve(s) {
      if (!s) return {};
      if (s.$ref) {
        const name = s.$ref.split("/").pop();
        return Object.assign({}, resolve(defs[name]), s.description ? { description: s.description } : {});
      }
      if (Array.isArray(s.anyOf)) {
        const rest = s.anyOf.filter(function (option) { return option.type !== "null"; });
        if (rest.length === 1) {
          return Object.assign({}, resolve(rest[0]), { nullable: true, description: s.description || rest[0].description, default: s.default });
        }
      }
      return s;
    }

    function rangeText(s) {
      const low = s.minimum !== undefined ? s.minimum : s.exclusiveMinimum;
      const high = s.maximum !== undefined ? s.maximum : s.exclusiveMaximum;
      const lowIn = s.minimum !== undefined;
      const highIn = s.maximum !== undefined;
      const show = function (value) { return Number(value).toLocaleString("en"); };
      if (low === undefined && high === undefined) return "";
      if (high === undefined) return (lowIn ? "at least " : "more than ") + show(low);
      if (low === undefined) return (highIn ? "at most " : "below ") + show(high);
      if (lowIn) return "from " + show(low) + (highIn ? " to " : ", below ") + show(high);
      return "more than " + show(low) + (highIn ? ", at most " : ", below ") + show(high);
    }

    // Descriptions are the API's (Markdown): its code quotes read as plain text here.
    function plain(text) { return String(text || "").replace(/`/g, ""); }

    // One field: label, control, help; `kind` is the value's type for serialising.
    function fieldBox(path, label, help, control, kind) {
      const box = element("div", { class: "field", "data-path": path });
      const id = "b-" + (ids += 1);
      control.id = id;
      control.dataset.path = path;
      control.dataset.kind = kind;
      if (control.type === "checkbox") {
        const row = element("div", { class: "check-row" });
        row.append(control, element("label", { for: id }, label));
        box.append(row);
      } else {
        box.append(element("label", { for: id }, label), control);
      }
      if (help) box.append(element("p", { class: "help" }, help));
      return box;
    }

    function scalarField(name, s, value, path, choices) {
      s = resolve(s);
      const label = humanize(name, path);
      const helps = [plain(s.description), rangeText(s)];
      if (s.default !== undefined && s.default !== null && s.type !== "boolean") helps.push("default " + s.default);
      const help = helps.filter(Boolean).join(" · ");
      let control;
      let kind = s.type || "string";
      const options = choices || s.enum;
      if (options) {
        control = element("select");
        control.append(element("option", { value: "" }, s.default !== undefined && s.default !== null ? "default (" + s.default + ")" : "—"));
        options.forEach(function (option) {
          control.append(element("option", { value: option, selected: value === option }, option));
        });
        kind = "string";
      } else if (s.type === "boolean") {
        control = element("input", { type: "checkbox", checked: value === undefined ? Boolean(s.default) : Boolean(value) });
      } else if (s.type === "integer" || s.type === "number") {
        control = element("input", {
          type: "number", inputmode: s.type === "integer" ? "numeric" : "decimal",
          step: s.type === "integer" ? 1 : "any",
          min: s.minimum, max: s.maximum,
          placeholder: s.default !== undefined && s.default !== null ? s.default : "",
          value: value === undefined || value === null ? "" : value,
        });
      } else {
        control = element("input", {
          type: "text", maxlength: s.maxLength, spellcheck: "false",
          placeholder: s.default !== undefined && s.default !== null ? s.default : "",
          value: value === undefined || value === null ? "" : value,
        });
      }
      const box = fieldBox(path, label, help, control, kind);
      if (s.type === "string" && (s.maxLength || 0) >= 1000) box.classList.add("wide"); // a URL
      return box;
    }

    // The fields of an object schema (the plan, or one of its parts) into `box`.
    function objectFields(box, s, value, prefix) {
      s = resolve(s);
      const grid = element("div", { class: "builder-grid" });
      const groups = [];
      Object.entries(s.properties || {}).forEach(function ([name, property]) {
        if (!prefix && (SKIPPED.has(name) || name === "strategies")) return;
        const path = prefix ? prefix + "." + name : name;
        const resolved = resolve(property);
        const current = value ? value[name] : undefined;
        if (resolved.type === "object" || resolved.properties) {
          groups.push(groupBox(name, resolved, current, path));
        } else {
          const choices = path === "stop.kind" ? Object.keys(schema.model_kinds) : null;
          grid.append(scalarField(name, property, current, path, choices));
        }
      });
      if (grid.childElementCount) box.append(grid);
      groups.forEach(function (group) { box.append(group); });
    }

    function groupBox(name, s, value, path) {
      const box = ADVANCED.has(name) ? element("details", { class: "builder-group", "data-path": path }) : element("fieldset", { class: "builder-group", "data-path": path });
      const title = humanize(name) + (s.nullable ? " (optional)" : "");
      box.append(element(ADVANCED.has(name) ? "summary" : "legend", {}, title));
      if (s.description) box.append(element("p", { class: "help" }, plain(s.description)));
      objectFields(box, s, value, path);
      return box;
    }

    // ---- strategies
    const strategySchema = resolve((schema.plan.properties.strategies || {}).items);
    const list = element("div", { class: "strategy-list", id: "strategy-list" });

    function paramField(param, value, path) {
      const helps = [param.description];
      if (param.low !== null || param.high !== null) {
        helps.push(param.low !== null && param.high !== null ? param.low + " to " + param.high : param.low !== null ? "at least " + param.low : "at most " + param.high);
      }
      let control;
      let kind = param.kind;
      if (param.kind === "choice" || param.kind === "bool") {
        control = element("select");
        const options = param.kind === "bool" ? ["true", "false"] : param.choices;
        control.append(element("option", { value: "" }, param.default !== null ? "default (" + param.default + ")" : "default"));
        options.forEach(function (option) {
          control.append(element("option", { value: option, selected: value !== undefined && String(value) === option }, option));
        });
      } else if (param.kind === "int" || param.kind === "float") {
        control = element("input", {
          type: "number", step: param.kind === "int" ? 1 : "any", min: param.low, max: param.high,
          placeholder: param.default !== null ? param.default : "", value: value === undefined ? "" : value,
        });
      } else if (param.kind === "triplets") {
        control = element("textarea", { rows: 3, spellcheck: "false", placeholder: "0 1 2\n3 4 5", class: "code" });
        control.value = Array.isArray(value) ? value.map(function (row) { return row.join(" "); }).join("\n") : (value || "");
        helps.push("one per line: a b c");
      } else {
        control = element("input", { type: "text", spellcheck: "false", placeholder: "0, 4, 9", value: Array.isArray(value) ? value.join(", ") : (value || "") });
        helps.push("object numbers, separated by commas");
      }
      return fieldBox(path + "." + param.name, humanize(param.name), helps.filter(Boolean).join(" · "), control, "param-" + kind);
    }

    function strategyCard(spec, position) {
      const path = "strategies." + position;
      const card = element("fieldset", { class: "strategy-card", "data-path": path });
      const head = element("legend", {}, "Strategy " + (position + 1));
      card.append(head);
      const grid = element("div", { class: "builder-grid" });
      Object.entries(strategySchema.properties || {}).forEach(function ([name, property]) {
        if (name === "params") return;
        const choices = name === "kind" ? Object.keys(kinds) : null;
        const box = scalarField(name, property, spec[name], path + "." + name, choices);
        if (name === "kind") {
          box.querySelector("select").firstChild.remove(); // a strategy has a kind
          box.querySelector("select").dataset.role = "kind";
          const about = kinds[spec.kind] ? kinds[spec.kind].description : "";
          box.querySelector(".help").textContent = about;
        }
        grid.append(box);
      });
      card.append(grid);
      const params = (kinds[spec.kind] || { params: [] }).params;
      const paramsBox = element("div", { class: "builder-grid params", "data-path": path + ".params" });
      if (params.length) {
        paramsBox.append(element("p", { class: "params-title" }, "Its parameters (blank: the default)"));
        params.forEach(function (param) {
          paramsBox.append(paramField(param, (spec.params || {})[param.name], path + ".params"));
        });
      } else {
        paramsBox.classList.add("empty-params"); // where a refusal of its params is shown
      }
      card.append(paramsBox);
      const remove = element("button", { type: "button", class: "small ghost remove-strategy", "data-remove": position }, "Remove");
      card.append(remove);
      return card;
    }

    function drawStrategies(specs) {
      list.replaceChildren();
      specs.forEach(function (spec, position) { list.append(strategyCard(spec, position)); });
      list.querySelectorAll(".remove-strategy").forEach(function (button) { button.hidden = specs.length < 2; });
    }

    // ---- reading the form back
    function parseParam(kind, text) {
      if (kind === "param-int" || kind === "param-float") {
        const number = Number(text);
        return Number.isFinite(number) ? number : text;
      }
      if (kind === "param-bool") return text === "true";
      if (kind === "param-indices") {
        const parts = text.split(/[\s,;]+/).filter(Boolean);
        return parts.map(function (part) { return /^-?\d+$/.test(part) ? Number(part) : part; });
      }
      if (kind === "param-triplets") {
        if (text.trim().startsWith("[")) { try { return JSON.parse(text); } catch (error) { return text; } }
        return text.split("\n").map(function (line) { return line.trim(); }).filter(Boolean).map(function (line) {
          return line.split(/[\s,;]+/).map(function (part) { return /^-?\d+$/.test(part) ? Number(part) : part; });
        });
      }
      return text;
    }

    function setPath(target, path, value) {
      const parts = path.split(".");
      let at = target;
      parts.slice(0, -1).forEach(function (part, i) {
        const next = parts[i + 1];
        if (at[part] === undefined) at[part] = /^\d+$/.test(next) ? [] : {};
        at = at[part];
      });
      at[parts[parts.length - 1]] = value;
    }

    function read() {
      const plan = { strategies: [] };
      form.querySelectorAll("[data-path][data-kind]").forEach(function (control) {
        const kind = control.dataset.kind;
        let value;
        if (control.type === "checkbox") {
          value = control.checked;
        } else {
          const text = control.value.trim();
          if (text === "") return; // blank: the default
          if (kind.startsWith("param-")) value = parseParam(kind, text);
          else if (kind === "integer" || kind === "number") {
            const number = Number(text);
            value = Number.isFinite(number) ? number : text;
          } else value = text;
        }
        setPath(plan, control.dataset.path, value);
      });
      plan.strategies = plan.strategies.filter(function (s) { return s !== undefined; });
      if (form.dataset.new === "true") plan.status = "draft"; // launched from the Launch tab
      return plan;
    }

    function sync() {
      if (jsonView) jsonView.value = JSON.stringify(read(), null, 2);
    }

    function draw(plan) {
      root.replaceChildren();
      const strategies = element("section", { class: "builder-section", "data-path": "strategies" });
      strategies.append(element("h3", {}, "Strategies"));
      strategies.append(element("p", { class: "help" }, "Each proposes questions; weights share them out, a budget caps how many distinct questions one creates."));
      strategies.append(list);
      const add = element("button", { type: "button", class: "small", id: "add-strategy" }, "Add a strategy");
      strategies.append(add);
      root.append(strategies);
      const rest = element("section", { class: "builder-section" });
      rest.append(element("h3", {}, "Sessions, checks and completion"));
      objectFields(rest, schema.plan, plan, "");
      root.append(rest);
      drawStrategies(plan.strategies && plan.strategies.length ? plan.strategies : [{ kind: "random" }]);
    }

    form.addEventListener("change", function (event) {
      const target = event.target;
      if (target instanceof HTMLSelectElement && target.dataset.role === "kind") {
        const plan = read();
        const position = Number(target.dataset.path.split(".")[1]);
        const previous = plan.strategies[position] || {};
        const known = new Set(((kinds[target.value] || {}).params || []).map(function (p) { return p.name; }));
        const params = {};
        Object.entries(previous.params || {}).forEach(function ([name, value]) { if (known.has(name)) params[name] = value; });
        plan.strategies[position] = Object.assign({}, previous, { kind: target.value, params });
        drawStrategies(plan.strategies);
      }
      sync();
    });
    form.addEventListener("input", sync);
    form.addEventListener("click", function (event) {
      const target = event.target instanceof Element ? event.target : null;
      if (!target) return;
      if (target.id === "add-strategy") {
        const plan = read();
        plan.strategies.push({ kind: "random" });
        drawStrategies(plan.strategies);
        sync();
      } else if (target.matches("[data-remove]")) {
        const plan = read();
        plan.strategies.splice(Number(target.dataset.remove), 1);
        drawStrategies(plan.strategies);
        sync();
      }
    });
    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      const plan = read();
      const button = form.querySelector("#save-plan");
      button.disabled = true;
      const result = await api("PUT", "/api/projects/" + encodeURIComponent(form.dataset.slug) + "/plan", plan);
      button.disabled = false;
      if (result.status === 200) {
        reloadWith(form.dataset.new === "true" ? "Plan saved as a draft: preview it, then launch it." : "Plan saved.");
        return;
      }
      showErrors(form, result.data, result.status);
    });
    const load = document.getElementById("json-to-form");
    if (load) {
      load.addEventListener("click", function () {
        try {
          draw(JSON.parse(jsonView.value));
          clearErrors(form);
        } catch (error) {
          showErrors(form, { detail: "The JSON cannot be read: " + error.message }, 0);
        }
      });
    }
    draw(current || { strategies: [{ kind: "random" }] });
    if (!current) sync();
  }

  function setUpBuilder(form) {
    const schema = JSON.parse(document.getElementById("plan-schema").textContent);
    const current = JSON.parse(document.getElementById("plan-current").textContent);
    Builder(form, schema, current);
  }

  // ---- start ----------------------------------------------------------------------------

  document.querySelectorAll("[data-upload]").forEach(setUpDropzone);
  const builder = document.getElementById("plan-builder");
  if (builder) setUpBuilder(builder);
  flash();
})();
