// The console's views beside the server table: the timeline (live from the feed's timeline events),
// a server's detail panel (its tools and log, from /api/servers/NAME) and the audit trail's records and
// identities. Uses the helpers of page.js, loaded before this file.
"use strict";

const TIMELINE_SHOWN = 200;  // entries the list shows; the ring holds more
const DETAIL_EVERY = 3000;  // ms between loads of an open detail panel
const AUDIT_EVERY = 10000;  // ms between loads of the audit views
const KIND_WORDS = {
  crash: "crash", failed: "failed", restart: "restart", stop: "stop", start: "start", ready: "ready",
  login: "login", state: "state", reload: "reload",
};
const timeline = [];  // entries, newest first
let detailName = null;
let detailTimer = null;
let detailLoading = false;

// --- the timeline

function timelineItem(entry) {
  const li = element("li");
  li.dataset.kind = entry.kind;
  li.append(element("span", "marker"), element("span", "time", clock(entry.time, true)));
  const who = element("span", "who", entry.server || "supervisor");
  if (entry.server) {
    who.dataset.server = entry.server;
    who.title = "show " + entry.server;
    who.addEventListener("click", () => openDetail(entry.server));
  }
  li.append(who, element("span", "what", KIND_WORDS[entry.kind] || entry.kind), element("span", "detail", entry.detail));
  li.title = new Date(entry.time * 1000).toLocaleString();
  return li;
}

function drawAxis() {
  const svg = document.getElementById("timeline-axis");
  const width = svg.clientWidth || 400;
  const now = Date.now() / 1000;
  svg.setAttribute("viewBox", `0 0 ${width} 34`);
  const span = chartSpan();  // the charts' span (page.js)
  const x = (time) => 6 + (width - 12) * (1 - (now - time) / span);
  const parts = [svgElement("line", {x1: 6, x2: width - 6, y1: 12, y2: 12}, "axis")];
  for (let quarter = 4; quarter >= 0; quarter--) {
    const ago = span * quarter / 4;
    const tick = svgElement("text", {x: x(now - ago), y: 30, "text-anchor": quarter === 4 ? "start" : quarter ? "middle" : "end"});
    tick.textContent = ago ? "−" + spanText(ago) : "now";
    parts.push(tick, svgElement("line", {x1: x(now - ago), x2: x(now - ago), y1: 9, y2: 15}, "axis"));
  }
  for (const entry of timeline) {
    if (now - entry.time > span) break;
    const dot = svgElement("circle", {cx: x(entry.time), cy: 12, r: entry.kind === "state" ? 3 : 5});
    dot.setAttribute("data-kind", entry.kind);
    parts.push(titled(dot, clock(entry.time, true) + " " + (entry.server || "supervisor") + ": " + entry.kind + (entry.detail ? " — " + entry.detail : "")));
  }
  svg.replaceChildren(...parts);
}

function drawTimeline() {
  const list = document.getElementById("timeline");
  list.replaceChildren(...timeline.slice(0, TIMELINE_SHOWN).map(timelineItem));
  document.getElementById("timeline-empty").hidden = timeline.length > 0;
  drawAxis();
}

function addToTimeline(entry) {
  timeline.unshift(entry);
  const list = document.getElementById("timeline");
  list.insertBefore(timelineItem(entry), list.firstChild);
  while (list.children.length > TIMELINE_SHOWN) list.lastChild.remove();
  document.getElementById("timeline-empty").hidden = true;
  drawAxis();
}

async function loadTimeline() {
  try {
    const answer = await getJSON("/api/timeline");
    if (!answer.ok) throw new Error(answer.body.error);
    timeline.splice(0, timeline.length, ...answer.body.events);
    drawTimeline();
  } catch (error) {
    say("could not load the timeline: " + error, true);
  }
}

// --- a server's detail

function openDetail(name) {
  detailName = name;
  for (const [server, tr] of rows) tr.classList.toggle("selected", server === name);
  document.getElementById("detail-title").textContent = name;
  document.getElementById("detail").hidden = false;
  loadDetail();
  clearInterval(detailTimer);
  detailTimer = setInterval(loadDetail, DETAIL_EVERY);
}

function closeDetail() {
  detailName = null;
  clearInterval(detailTimer);
  document.getElementById("detail").hidden = true;
  for (const tr of rows.values()) tr.classList.remove("selected");
}

function detailChanged(server) { if (server === detailName) loadDetail(); }

async function loadDetail() {
  if (detailName === null || detailLoading) return;
  const name = detailName;
  detailLoading = true;
  try {
    const answer = await getJSON("/api/servers/" + encodeURIComponent(name));
    if (name !== detailName) return;
    if (!answer.ok) {
      renderDetailError(answer.body.error);
      return;
    }
    renderDetail(answer.body);
  } catch (error) {
    renderDetailError(String(error));
  } finally {
    detailLoading = false;
  }
}

function renderDetailError(message) {
  document.getElementById("detail-status").replaceChildren(element("dd", "error", message));
}

function renderDetail(detail) {
  const status = detail.status;
  const badge = document.getElementById("detail-state");
  badge.textContent = status.state;
  badge.dataset.state = status.state;
  const facts = [
    ["transport", status.transport + (status.scope === "client" ? ", a worker per client" : "")],
    ["restarts", status.restarts],
    ["worker pid", status.worker_pid ?? "–"],
    ["server pid", status.server_pid ?? "–"],
    ["workers", status.workers.length ? status.workers.map((w) => w.name + " " + w.state).join(", ") : "one"],
    ["sandbox", status.sandbox || "not sandboxed"],
    ["last error", status.last_error || "none"],
  ];
  const dl = document.getElementById("detail-status");
  dl.replaceChildren(...facts.flatMap(([name, value]) => [element("dt", "", name), element("dd", "", String(value))]));
  document.getElementById("detail-tool-count").textContent = "(" + detail.tools.length + ")";
  document.querySelector("#detail-tools tbody").replaceChildren(...detail.tools.map(toolRow));
  renderLogs(detail.logs);
}

function toolRow(tool) {
  const tr = element("tr");
  tr.dataset.tool = tool.name;
  const name = element("td", "tool", tool.name);
  if (tool.title) name.title = tool.title;
  const params = element("td", "params");
  for (const param of tool.params) {
    const line = element("span", "param", param.name + ": " + param.type);
    if (param.required) line.appendChild(element("span", "required", " *"));
    if (param.description) line.title = param.description;
    params.appendChild(line);
  }
  if (!tool.params.length) params.appendChild(element("span", "param muted", "none"));
  params.title = JSON.stringify(tool.input_schema, null, 2);
  tr.append(name, params, element("td", "description", tool.description));
  return tr;
}

function renderLogs(lines) {
  const pre = document.getElementById("detail-logs");
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
  const shown = lines.map((line) => {
    const div = element("div", "line " + line.stream + (line.level === "ERROR" || line.level === "CRITICAL" ? " error" : ""));
    div.dataset.seq = line.seq;
    const meta = clock(line.time, true) + " " + line.worker + (line.stream === "worker" ? " " + (line.level || "worker") : "") + "  ";
    div.append(element("span", "meta", meta), document.createTextNode(line.text));
    return div;
  });
  if (!shown.length) shown.push(element("div", "meta", "no lines yet"));
  pre.replaceChildren(...shown);
  if (atBottom || !pre.dataset.seen) pre.scrollTop = pre.scrollHeight;
  pre.dataset.seen = "yes";
}

// --- the audit trail

function auditQuery() {
  const params = new URLSearchParams();
  for (const name of ["identity", "tool", "since"]) {
    const value = document.getElementById("audit-" + name).value.trim();
    if (value) params.set(name, value);
  }
  params.set("limit", "200");
  return params.toString();
}

function isoClock(iso) {
  const date = new Date(iso);
  return isNaN(date) ? iso : date.toLocaleTimeString([], {hourCycle: "h23"});
}

function noAudit(table, state, answer) {
  table.hidden = true;
  state.textContent = answer.status === 404 ? "no audit trail" : "could not load: " + answer.body.error;
  state.dataset.audit = answer.status === 404 ? "none" : "error";
}

async function loadAudit() {
  const table = document.getElementById("audit");
  const state = document.getElementById("audit-state");
  try {
    const answer = await getJSON("/api/audit?" + auditQuery());
    if (!answer.ok) { noAudit(table, state, answer); return; }
    const audit = answer.body;
    table.querySelector("tbody").replaceChildren(...audit.records.map((record) => {
      const tr = element("tr");
      const outcome = element("td", "outcome", record.outcome);
      outcome.dataset.outcome = record.outcome;
      const when = element("td", "time", isoClock(record.time));
      when.title = record.time;
      const tool = element("td", "tool", record.tool);
      tool.title = "server " + record.server + ", arguments " + (record.argDigest || "");
      const who = element("td", "identity", record.identity);
      who.title = "session " + record.session;
      const ms = element("td", "num ms", record.ms.toFixed(1));
      ms.title = record.ms + " ms";
      const sizes = element("td", "num bytes", record.argBytes + " / " + record.resultBytes);
      sizes.title = "arguments " + record.argBytes + " bytes, result " + record.resultBytes + " bytes";
      tr.append(when, who, element("td", "kind", record.kind), tool, outcome, ms, sizes);
      return tr;
    }));
    table.hidden = false;
    state.dataset.audit = "yes";
    state.textContent = plural(audit.records.length, "record") + " shown · " + audit.path.split("/").pop() + ": " +
      plural(audit.lines, "line") + ", " + plural(audit.failures, "write failure") + ", " + audit.dropped + " dropped";
    state.title = audit.path;
  } catch (error) {
    state.textContent = "could not load the audit trail: " + error;
  }
}

async function loadIdentities() {
  const table = document.getElementById("identities");
  const state = document.getElementById("identities-state");
  try {
    const answer = await getJSON("/api/identities");
    if (!answer.ok) { noAudit(table, state, answer); return; }
    const identities = answer.body.identities;
    table.querySelector("tbody").replaceChildren(...identities.map((one) => {
      const tr = element("tr");
      tr.dataset.identity = one.identity;
      const name = element("td", "identity " + (one.active ? "active" : "idle"), one.identity);
      name.title = one.active ? "active" : "not active";
      const sessions = element("td", "num sessions", one.sessions.length);  // the latest 32 at most
      sessions.title = one.sessions.join(", ") || "no session named";
      tr.append(name, sessions, element("td", "num", one.calls),
        element("td", "num", one.errors), element("td", "", isoClock(one.firstSeen)), element("td", "", isoClock(one.lastSeen)));
      return tr;
    }));
    table.hidden = false;
    state.dataset.audit = "yes";
    const active = identities.filter((one) => one.active).length;
    state.textContent = plural(identities.length, "identity", "identities") + ", " + active + " active";
  } catch (error) {
    state.textContent = "could not load the identities: " + error;
  }
}

function loadAuditViews() { loadAudit(); loadIdentities(); }

function axisTick() {  // the axis moves with the clock: redrawn every 1/120 of its span (1 to 30 s)
  drawAxis();
  setTimeout(axisTick, Math.min(30000, Math.max(1000, chartSpan() * 1000 / 120)));
}

function startViews() {
  loadTimeline();
  axisTick();
  document.getElementById("detail-close").addEventListener("click", closeDetail);
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") closeDetail(); });
  document.getElementById("audit-form").addEventListener("submit", (event) => { event.preventDefault(); loadAudit(); });
  document.getElementById("audit-since").addEventListener("change", loadAudit);
  loadAuditViews();
  setInterval(loadAuditViews, AUDIT_EVERY);
  window.addEventListener("resize", drawAxis);
}
