// The sqltopic console: logs in (or takes a token from the URL's #token=...), reads
// /api/overview every refresh_ms and draws it. Every value goes into the page as text
// (textContent, SVG attributes), never as HTML: names and SQL are the users' own.
"use strict";

const TOKEN_KEY = "sqltopic-token";
const SVG = "http://www.w3.org/2000/svg";
// One colour per vgroup line, in order; the rest repeat.
const PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#e16f24", "#57606a"];
const CHART_W = 640;
const CHART_H = 150;
const PAD = { left: 56, right: 8, top: 8, bottom: 20 };

let token = null;
let timer = null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function formatLag(ms) {
  if (ms === null || ms === undefined) return "unknown";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function formatTime(iso) {
  if (!iso) return "";
  return new Date(iso).toLocaleString();
}

async function call(method, path, body) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store", credentials: "omit",
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const err = new Error((data.error && data.error.message) || answer.statusText);
    err.status = answer.status;
    throw err;
  }
  return data;
}

function table(node, columns, rows, cells) {
  node.replaceChildren();
  const head = el("tr");
  for (const c of columns) head.append(el("th", c));
  node.append(head);
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "none", "empty");
    td.colSpan = columns.length;
    tr.append(td);
    node.append(tr);
    return;
  }
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of cells(row)) tr.append(cell instanceof Node ? cell : el("td", cell));
    node.append(tr);
  }
}

function num(value) {
  return el("td", value === null || value === undefined ? "" : value, "num");
}

// The lag chart of one (topic, group): one line per vgroup, lag_ms over the samples.
function chart(lag, series) {
  const box = svg("svg", {
    class: "chart", width: CHART_W, height: CHART_H, viewBox: `0 0 ${CHART_W} ${CHART_H}`,
    role: "img",
  });
  const times = lag.times;
  const values = series.flatMap((s) => s.lag_ms.filter((v) => v >= 0));
  const top = Math.max(1000, ...values) * 1.1;
  const t0 = times.length ? times[0] : 0;
  const span = Math.max(1, (times.length ? times[times.length - 1] : 1) - t0);
  const x = (t) => PAD.left + ((t - t0) / span) * (CHART_W - PAD.left - PAD.right);
  const y = (v) => CHART_H - PAD.bottom - (v / top) * (CHART_H - PAD.top - PAD.bottom);
  box.append(svg("line", { x1: PAD.left, y1: y(0), x2: CHART_W - PAD.right, y2: y(0), stroke: "#8c959f" }));
  box.append(svg("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: y(0), stroke: "#8c959f" }));
  const label = svg("text", { x: 4, y: PAD.top + 10 });
  label.textContent = formatLag(Math.round(top));
  box.append(label);
  const zero = svg("text", { x: 4, y: y(0) });
  zero.textContent = "0";
  box.append(zero);
  const ago = svg("text", { x: PAD.left, y: CHART_H - 4 });
  ago.textContent = `${formatLag(span)} ago`;
  box.append(ago);
  const now = svg("text", { x: CHART_W - PAD.right - 24, y: CHART_H - 4 });
  now.textContent = "now";
  box.append(now);
  series.forEach((s, i) => {
    const offset = times.length - s.lag_ms.length;
    let d = "";
    let pen = "M";
    s.lag_ms.forEach((v, j) => {
      if (v < 0) { pen = "M"; return; }
      d += `${pen}${x(times[offset + j]).toFixed(1)},${y(v).toFixed(1)} `;
      pen = "L";
    });
    box.append(svg("path", {
      d: d.trim() || "M0,0", fill: "none", stroke: PALETTE[i % PALETTE.length],
      "stroke-width": 2.5, class: "lag-line", "data-vgroup": s.vgroup,
      "data-points": s.lag_ms.filter((v) => v >= 0).length,
    }));
  });
  return box;
}

function renderGroups(data) {
  const root = document.getElementById("groups");
  root.replaceChildren();
  const byKey = new Map();
  for (const s of data.subscriptions) {
    const key = `${s.topic_name}\u0000${s.consumer_group}`;
    if (!byKey.has(key)) byKey.set(key, []);
    byKey.get(key).push(s);
  }
  if (byKey.size === 0) root.append(el("p", "No consumer group has subscribed yet.", "empty"));
  for (const rows of byKey.values()) {
    const { topic_name: topic, consumer_group: group, mode } = rows[0];
    const worst = Math.max(0, ...rows.map((r) => r.lag_ms || 0));
    const card = el("div", null, worst > 0 ? "group behind" : "group");
    card.dataset.group = group;
    card.dataset.topic = topic;
    card.dataset.lagMs = worst;
    const title = el("h3");
    title.append(el("span", `group ${group}`), el("span", ` · topic ${topic}`));
    if (mode) title.append(el("span", ` · group.type ${mode}`));
    title.append(el("span", ` · lag ${formatLag(worst)}`, "lag"));
    card.append(title);
    const series = data.lag.series.filter((s) => s.topic === topic && s.group === group);
    if (series.length) {
      card.append(chart(data.lag, series));
      const legend = el("div", null, "legend");
      series.forEach((s, i) => {
        const item = el("span");
        const swatch = el("i");
        swatch.style.background = PALETTE[i % PALETTE.length];
        item.append(swatch, `vgroup ${s.vgroup}`);
        legend.append(item);
      });
      card.append(legend);
    }
    const vgroups = el("table");
    table(vgroups, ["vgroup", "consumer", "offset", "lag rows", "lag", "rows delivered", "last poll", "last commit"],
      rows, (r) => [num(r.vgroup_id), r.consumer_id || "unassigned", r.offset || "",
        num(r.lag_rows), el("td", formatLag(r.lag_ms), "num lag"), num(r.rows),
        formatTime(r.last_poll), formatTime(r.last_commit)]);
    card.append(vgroups);
    root.append(card);
  }
}

function render(data) {
  document.getElementById("who").textContent =
    `${data.user.user}${data.user.superuser ? " (superuser)" : ""}`;
  document.getElementById("status").textContent = `updated ${formatTime(data.now)}`;
  renderGroups(data);
  table(document.getElementById("consumers"),
    ["consumer", "group", "client.id", "user", "host", "status", "topic", "mode", "up since", "last rebalance"],
    data.consumers, (c) => [c.consumer_id, c.consumer_group, c.client_id, c.user, c.fqdn, c.status,
      c.topic, c.mode, formatTime(c.up_time), formatTime(c.rebalance_time)]);
  table(document.getElementById("rebalances"),
    ["time", "group", "topic", "cause", "by consumer", "consumers", "new assignments"],
    data.rebalances, (r) => [formatTime(r.time), r.group, r.topic, r.cause, r.consumer_id, num(r.consumers),
      r.assigned.map((a) => `${a.consumer_id}: [${a.vgroups.join(", ")}]`).join("; ")]);
  table(document.getElementById("topics"), ["topic", "database", "type", "owner", "created", "SQL"],
    data.topics, (t) => [t.topic_name, t.db_name, t.type, t.owner, formatTime(t.create_time),
      el("td", t.sql, "sql")]);
  table(document.getElementById("databases"), ["database", "vgroups", "tables", "precision", "created"],
    data.databases, (d) => [d.name, num(d.vgroups), num(d.ntables), d.precision, formatTime(d.create_time)]);
  table(document.getElementById("vgroups"), ["database", "vgroup", "dnode", "endpoint", "status", "versions"],
    data.vgroups, (v) => [v.database, num(v.vgroup), num(v.dnode), v.endpoint, v.status, v.versions]);
  document.body.dataset.loaded = "1";
}

function showLogin(message) {
  clearTimeout(timer);
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("main").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("who").textContent = "";
}

async function refresh() {
  let wait = 2000;
  try {
    const data = await call("GET", "/api/overview");
    render(data);
    wait = data.refresh_ms;
  } catch (err) {
    if (err.status === 401) {
      showLogin(`Log in again: ${err.message}`);
      return;
    }
    document.getElementById("status").textContent = `not updated: ${err.message}`;
  }
  timer = setTimeout(refresh, wait);
}

function start() {
  document.getElementById("login").hidden = true;
  document.getElementById("main").hidden = false;
  document.getElementById("logout").hidden = false;
  refresh();
}

async function login(event) {
  event.preventDefault();
  const user = document.getElementById("login-user").value;
  const password = document.getElementById("login-password").value;
  try {
    const answer = await call("POST", "/api/session", { user, password });
    token = answer.token;
    sessionStorage.setItem(TOKEN_KEY, token);
    document.getElementById("login-password").value = "";
    start();
  } catch (err) {
    document.getElementById("login-error").textContent = err.message;
  }
}

async function logout() {
  try { await call("DELETE", "/api/session"); } catch (err) { /* ended already */ }
  showLogin("Logged out.");
}

function init() {
  document.getElementById("login-form").addEventListener("submit", login);
  document.getElementById("logout").addEventListener("click", logout);
  const fromUrl = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    history.replaceState(null, "", location.pathname);  // not left in history or screenshots
  }
  token = sessionStorage.getItem(TOKEN_KEY);
  if (token) start(); else showLogin();
}

init();
