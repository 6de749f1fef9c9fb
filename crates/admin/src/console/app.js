// Turnpike web console: the login form and the console page. No framework; every piece of
// data reaches the page through textContent or attribute values, never as markup.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const COOKIE = "turnpike_admin";
  const PERIOD = 2000;
  const secure = location.protocol === "https:" ? "; Secure" : "";

  // ---- login page (served with the 401) ----
  const loginForm = $("login-form");
  if (loginForm) {
    const input = $("token");
    const msg = $("login-msg");
    if (new RegExp("(?:^|;\\s*)" + COOKIE + "=[^;]").test(document.cookie)) {
      msg.textContent = "The saved token was not accepted. Enter the current one.";
      msg.hidden = false;
      input.setAttribute("aria-invalid", "true");
    }
    loginForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) return input.focus();
      document.cookie = COOKIE + "=" + encodeURIComponent(token) + "; path=/; SameSite=Strict" + secure;
      location.assign("/console");
    });
    return;
  }
  if (!$("exchanges")) return;

  // ---- helpers ----
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    if (attrs) for (const k in attrs) if (attrs[k] != null && attrs[k] !== false) n.setAttribute(k, attrs[k]);
    for (const k of kids) if (k != null) n.append(k); // strings become text nodes
    return n;
  }
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const dash = "—";
  const num = (v, digits) => (v == null || !isFinite(v) ? dash : Number(v).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits }));
  const ms = (v) => (v == null ? dash : num(v, v < 10 ? 2 : v < 100 ? 1 : 0) + " ms");
  const statusClass = (s) => (s >= 100 && s < 600 ? Math.floor(s / 100) + "xx" : "none");

  function fmtTime(t) {
    if (t == null) return dash;
    const d = new Date(t);
    if (isNaN(d)) return dash;
    const now = new Date();
    const day = d.toDateString() === now.toDateString() ? "" :
      d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " ";
    return day + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad(d.getMilliseconds(), 3);
  }
  const iso = (t) => { if (t == null) return ""; const d = new Date(t); return isNaN(d) ? "" : d.toISOString(); };

  function fmtUptime(s) {
    s = Math.max(0, Math.floor(s || 0));
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + (s % 60) + "s";
    return s + "s";
  }

  class HttpError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  let signedOut = false;
  async function getJSON(url) {
    let r;
    try {
      r = await fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } });
    } catch (_) {
      throw new HttpError(0, "the admin API cannot be reached");
    }
    if (r.status === 401) {
      if (!signedOut) { signedOut = true; location.assign("/console"); }
      throw new HttpError(401, "the admin token is no longer accepted");
    }
    if (!r.ok) {
      let detail = "";
      try { const p = await r.json(); detail = p.detail || p.title || ""; } catch (_) { /* not JSON */ }
      throw new HttpError(r.status, url.split("?")[0] + " answered " + r.status + (detail ? ": " + detail : ""));
    }
    return r.json();
  }

  // One banner for every failing source; it clears once they all answer again.
  const errors = new Map();
  function setError(key, err) {
    if (err) errors.set(key, err.message || String(err)); else errors.delete(key);
    const b = $("banner");
    const text = [...new Set(errors.values())].join(" · ");
    if (b.textContent !== text) b.textContent = text;
    b.hidden = !text;
  }

  // ---- stats: header, APIs, upstreams ----
  let statsSeq = 0, lastReloadKey = "", lastApiNames = "";
  async function loadStats() {
    const seq = ++statsSeq;
    try {
      const s = await getJSON("/admin/v1/stats");
      if (seq !== statsSeq) return;
      renderStats(s);
      setError("stats", null);
    } catch (e) {
      if (seq === statsSeq && e.status !== 401) setError("stats", e);
    }
  }

  function renderStats(s) {
    $("revision").textContent = s.revision == null ? dash : "#" + s.revision;
    $("uptime").textContent = fmtUptime(s.uptimeSeconds);
    const r = s.lastReload;
    const reloadKey = JSON.stringify(r || null);
    if (reloadKey !== lastReloadKey) {
      lastReloadKey = reloadKey;
      const dd = $("reload");
      const box = $("reload-errors");
      if (!r) {
        dd.replaceChildren(dash);
        box.hidden = true;
      } else {
        const at = r.at ? new Date(r.at * 1000) : null;
        dd.replaceChildren(
          el("span", { class: "badge " + (r.ok ? "ok" : "bad") }, r.ok ? "ok" : "failed"),
          " " + [r.trigger, at && !isNaN(at) ? at.toLocaleString() : null].filter(Boolean).join(" · "));
        const list = Array.isArray(r.errors) ? r.errors : [];
        box.querySelector("ul").replaceChildren(...list.map((e) => el("li", null, typeof e === "string" ? e : JSON.stringify(e))));
        box.hidden = r.ok || !list.length;
      }
    }

    const apis = Array.isArray(s.apis) ? s.apis : [];
    $("apis").tBodies[0].replaceChildren(...apis.map((a) => {
      const er = a.errorRate;
      return el("tr", null,
        el("th", { scope: "row" }, a.name),
        el("td", { class: "num" }, num(a.requests, 0)),
        el("td", { class: "num" }, a.rate == null ? dash : num(a.rate, 1) + "/s"),
        el("td", { class: "num" }, ms(a.p50Ms)),
        el("td", { class: "num" }, ms(a.p99Ms)),
        el("td", { class: "num" + (er >= 0.05 ? " bad-text" : er > 0 ? " warn-text" : "") },
          er == null ? dash : num(er * 100, 2) + " %"));
    }));
    $("apis-empty").hidden = apis.length > 0;
    fillApiFilter(apis.map((a) => a.name).filter((n) => n != null));

    const ups = Array.isArray(s.upstreams) ? s.upstreams : [];
    $("upstreams").replaceChildren(...ups.map((u) => {
      const nodes = Array.isArray(u.nodes) ? u.nodes : [];
      const up = nodes.filter((n) => n.healthy).length;
      return el("li", null,
        el("div", { class: "up-head" },
          el("span", { class: "up-name" }, u.name),
          el("span", { class: "muted small" }, up + "/" + nodes.length + " healthy")),
        el("ul", { class: "nodes", "aria-label": "Nodes of " + u.name }, ...nodes.map((n) =>
          el("li", { class: "node " + (n.healthy ? "ok" : "bad") },
            el("span", { class: "dot", "aria-hidden": "true" }),
            el("span", { class: "mono" }, n.node),
            el("span", { class: "state" }, n.healthy ? "healthy" : "down")))));
    }));
    $("upstreams-empty").hidden = ups.length > 0;
  }

  function fillApiFilter(names) {
    names = [...new Set(names)].sort();
    const key = names.join("\n");
    if (key === lastApiNames) return;
    lastApiNames = key;
    const sel = $("api-filter");
    const cur = sel.value;
    if (cur && !names.includes(cur)) names.push(cur);
    sel.replaceChildren(el("option", { value: "" }, "all"), ...names.map((n) => el("option", { value: n }, n)));
    sel.value = cur;
  }

  // ---- exchanges ----
  const STATUS_RE = /^[1-5](?:xx|[0-9]{2})$/i;
  let exSeq = 0, lastExKey = null, selected = null;

  function statusFilter() {
    const input = $("status-filter");
    const v = input.value.trim();
    const ok = !v || STATUS_RE.test(v);
    if (ok) input.removeAttribute("aria-invalid"); else input.setAttribute("aria-invalid", "true");
    return ok ? v.toLowerCase() : null;
  }

  async function loadExchanges() {
    const status = statusFilter();
    if (status == null) return;
    const q = new URLSearchParams({ limit: "100" });
    const api = $("api-filter").value;
    if (api) q.set("api", api);
    if (status) q.set("status", status);
    const seq = ++exSeq;
    try {
      const r = await getJSON("/admin/v1/exchanges?" + q);
      if (seq !== exSeq) return;
      renderExchanges(Array.isArray(r.items) ? r.items : [], r.size);
      const off = $("exchanges-off");
      off.hidden = r.enabled !== false;
      off.textContent = r.enabled === false ? r.hint : "";
      if (r.enabled === false) $("exchanges-empty").hidden = true;
      setError("exchanges", null);
    } catch (e) {
      if (seq === exSeq && e.status !== 401) setError("exchanges", e);
    }
  }

  function renderExchanges(items, size) {
    $("ex-count").textContent = items.length + " shown" + (size ? " · buffer of " + size : "");
    $("exchanges-empty").hidden = items.length > 0;
    const key = items.map((x) => x.id).join(",");
    if (key === lastExKey) return; // nothing new: keep the DOM (and focus) as it is
    lastExKey = key;
    const active = document.activeElement;
    const focusedId = active && active.closest && active.closest("#exchanges tr[data-id]") ? active.closest("tr").dataset.id : null;
    const body = $("exchanges").tBodies[0];
    body.replaceChildren(...items.map((x) => {
      const cls = statusClass(x.status);
      return el("tr", { "data-id": x.id, class: x.id === selected ? "selected" : null },
        el("td", { class: "mono nowrap", title: iso(x.time) }, fmtTime(x.time)),
        el("td", { class: "mono" }, x.method),
        el("td", { class: "uri" }, el("button", { type: "button", class: "open mono", title: x.uri }, x.uri || "/")),
        el("td", { class: "num" }, el("span", { class: "status s" + cls }, x.status ? String(x.status) : dash)),
        el("td", { class: "num nowrap" }, ms(x.durationMs)),
        el("td", { class: "opt" }, x.api == null ? dash : x.api),
        el("td", { class: "opt mono" }, x.node == null ? dash : x.node));
    }));
    if (focusedId) {
      const row = rowOf(focusedId);
      if (row) row.querySelector("button").focus();
    }
  }

  const rowOf = (id) => [...$("exchanges").tBodies[0].rows].find((r) => r.dataset.id === id);

  function markSelected() {
    for (const r of $("exchanges").tBodies[0].rows) r.classList.toggle("selected", r.dataset.id === selected);
  }

  // ---- details ----
  let detSeq = 0;
  async function openDetails(id) {
    selected = id;
    markSelected();
    const panel = $("details");
    const body = $("details-body");
    panel.hidden = false;
    $("details-h").textContent = "Exchange";
    body.replaceChildren(el("p", { class: "muted" }, "Loading…"));
    $("details-h").focus();
    const seq = ++detSeq;
    try {
      const x = await getJSON("/admin/v1/exchanges/" + encodeURIComponent(id));
      if (seq === detSeq) renderDetails(x);
    } catch (e) {
      if (seq !== detSeq) return;
      body.replaceChildren(el("p", { class: "notice" }, e.status === 404
        ? "This exchange is no longer in the buffer: newer traffic has replaced it."
        : "The exchange could not be loaded: " + e.message));
    }
  }

  function closeDetails() {
    const panel = $("details");
    if (panel.hidden) return;
    panel.hidden = true;
    detSeq++;
    const row = selected && rowOf(selected);
    selected = null;
    markSelected();
    if (row) row.querySelector("button").focus(); else $("exchanges-h").focus();
  }

  function headersTable(caption, kind, headers) {
    if (!Array.isArray(headers) || !headers.length) return el("p", { class: "muted" }, "No headers.");
    return el("div", { class: "scroll" }, el("table", { class: "headers", "data-kind": kind },
      el("caption", { class: "sr-only" }, caption),
      el("tbody", null, ...headers.map((h) => el("tr", null,
        el("th", { scope: "row" }, String(h[0])),
        el("td", null, String(h[1] == null ? "" : h[1])))))));
  }

  function pretty(text) {
    const t = text.trimStart();
    if (t[0] === "{" || t[0] === "[") {
      try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not (whole) JSON */ }
    }
    return text;
  }

  function bodyBlock(label, kind, text, truncated) {
    const head = el("h4", null, label);
    const parts = [head];
    if (truncated) {
      head.append(" ", el("span", { class: "badge warn" }, "truncated"));
      parts.push(el("p", { class: "muted small" }, "Only the beginning of this body was recorded."));
    }
    parts.push(text == null || text === ""
      ? el("p", { class: "muted" }, "Empty.")
      : el("pre", { class: "body", "data-kind": kind, tabindex: "0", "aria-label": label }, pretty(String(text))));
    return el("div", null, ...parts);
  }

  function renderDetails(x) {
    $("details-h").textContent = (x.method || "") + " " + (x.uri || "");
    const cls = statusClass(x.status);
    const facts = [
      ["Status", el("span", { class: "status s" + cls }, x.status ? String(x.status) : dash)],
      ["Time", fmtTime(x.time) + " (" + iso(x.time) + ")"],
      ["Duration", ms(x.durationMs)],
      ["API", x.api == null ? dash : x.api],
      ["Node", x.node == null ? dash : x.node],
      ["Client", x.client == null ? dash : x.client],
      ["ID", x.id],
    ];
    if (x.error) facts.push(["Error", el("span", { class: "bad-text" }, String(x.error))]);
    $("details-body").replaceChildren(
      el("dl", { class: "summary" }, ...facts.map(([k, v]) => el("div", null, el("dt", null, k), el("dd", { class: "mono" }, v)))),
      el("section", { "aria-label": "Request" },
        el("h3", null, "Request"),
        headersTable("Request headers", "request", x.requestHeaders),
        bodyBlock("Request body", "request", x.requestBody, x.requestBodyTruncated)),
      el("section", { "aria-label": "Response" },
        el("h3", null, "Response"),
        headersTable("Response headers", "response", x.responseHeaders),
        bodyBlock("Response body", "response", x.responseBody, x.responseBodyTruncated)));
  }

  // ---- polling and events ----
  let timer = 0;
  async function tick(all) {
    clearTimeout(timer);
    await Promise.all([loadStats(), all || $("auto").checked ? loadExchanges() : null]);
    schedule();
  }
  function schedule() {
    clearTimeout(timer);
    if (!document.hidden && !signedOut) timer = setTimeout(tick, PERIOD);
  }

  $("filters").addEventListener("submit", (e) => { e.preventDefault(); lastExKey = null; tick(true); });
  $("api-filter").addEventListener("change", () => loadExchanges());
  let typing = 0;
  $("status-filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { if (statusFilter() != null) loadExchanges(); }, 300);
  });
  $("auto").addEventListener("change", () => { if ($("auto").checked) tick(true); });
  $("exchanges").tBodies[0].addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-id]");
    if (row) openDetails(row.dataset.id);
  });
  $("close-details").addEventListener("click", closeDetails);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeDetails(); });
  document.addEventListener("visibilitychange", () => { if (document.hidden) clearTimeout(timer); else tick(); });
  $("logout").addEventListener("click", () => {
    document.cookie = COOKIE + "=; path=/; max-age=0; SameSite=Strict" + secure;
    location.assign("/console");
  });

  tick(true);
})();
