// The console's core: the header's totals, the server table with its sparklines, the controls and
// the live feed. The timeline, the detail panel and the audit views are in views.js, loaded after
// this file; start() runs once both are.
"use strict";

const SVG = "http://www.w3.org/2000/svg";  // the namespace of SVG elements (not a request)
const COLUMNS = ["server", "state", "restarts", "tools", "sandbox", "per_second", "p50", "p99",
  "spark_calls", "spark_latency", "spark_errors", "last_error"];
const NUMERIC = new Set(["restarts", "tools", "per_second", "p50", "p99"]);
const ACTIONS = ["restart", "stop", "start"];
const HISTORY_EVERY = 5000;  // ms between loads of /api/history (at most; once a bucket when shorter)
const POINTS = 60;  // points each chart holds: the history's buckets
const DEFAULT_BUCKET = 60;  // seconds a point until /api/history says (statusBucket)
const SPARK = {width: 120, height: 28};  // the sparklines' drawing box (CSS may scale it)
const rows = new Map();  // server name -> its <tr>
let controls = false;
let loading = null;
let lastStatus = null;
let lastHistory = null;

// --- formatting and elements

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 0.01) return (seconds * 1000).toFixed(2) + " ms";
  if (seconds < 1) return (seconds * 1000).toFixed(1) + " ms";
  return seconds.toFixed(2) + " s";
}

function clock(unix, seconds) {  // a time of day, local
  const options = {hour: "2-digit", minute: "2-digit", hourCycle: "h23"};
  if (seconds) options.second = "2-digit";
  return new Date(unix * 1000).toLocaleTimeString([], options);
}

function plural(count, word, many) { return count + " " + (count === 1 ? word : many || word + "s"); }

function spanText(seconds) {  // a length of time, short: "1 h", "2 min", "45 s", "1 min 30 s"
  const unit = (count, name) => count + "\u00a0" + name;  // a number never parted from its unit
  if (seconds % 3600 === 0) return unit(seconds / 3600, "h");
  if (seconds % 60 === 0) return unit(seconds / 60, "min");
  if (seconds < 60) return unit(seconds, "s");
  return unit(Math.floor(seconds / 60), "min") + " " + unit(seconds % 60, "s");
}

function bucketSeconds() { return lastHistory ? lastHistory.bucket : DEFAULT_BUCKET; }

function chartSpan() { return bucketSeconds() * POINTS; }  // seconds the charts and the timeline's axis show

function lastWords(seconds) {  // "the last hour", "the last 2 min"
  return "the last " + (seconds === 3600 ? "hour" : seconds === 60 ? "minute" : spanText(seconds));
}

function bucketName(bucket) {  // what one point of a chart is: "minute", "2 s bucket"
  return {1: "second", 60: "minute", 3600: "hour"}[bucket] || spanText(bucket) + " bucket";
}

function relabel() {  // the words that say how much the charts show follow the history's bucket
  const span = chartSpan();
  const bucket = bucketSeconds();
  for (const node of document.querySelectorAll(".span-short")) node.textContent = spanText(span);
  for (const node of document.querySelectorAll(".span-long")) node.textContent = lastWords(span);
  const words = {1: "a second", 60: "a minute", 3600: "an hour"}[bucket] || "every " + spanText(bucket);
  document.getElementById("bucket-words").textContent = words;
  document.getElementById("timeline-axis").setAttribute("aria-label", "events of " + lastWords(span));
}

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined && text !== null) made.textContent = text;
  return made;
}

function svgElement(tag, attributes, className) {
  const made = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes || {})) made.setAttribute(name, value);
  if (className) made.setAttribute("class", className);
  return made;
}

function titled(node, text) {
  const title = svgElement("title");
  title.textContent = text;
  node.appendChild(title);
  return node;
}

async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store"});
  const body = await response.json();
  return {ok: response.ok, status: response.status, body};
}

function say(text, error) {
  const message = document.getElementById("message");
  message.textContent = text;
  message.className = error ? "error" : "";
}

// --- the server table

function cell(tr, column) { return tr.querySelector("td." + column); }

function setState(tr, state) {
  const td = cell(tr, "state");
  td.dataset.state = state;
  td.firstChild.textContent = state;
}

function setError(tr, error) {
  const td = cell(tr, "last_error");
  td.textContent = error || "";
  td.title = error || "";
}

function newRow(name) {
  const tr = document.createElement("tr");
  tr.dataset.server = name;
  tr.tabIndex = 0;
  for (const column of COLUMNS) {
    const td = element("td", column + (NUMERIC.has(column) ? " num" : "") + (column.startsWith("spark") ? " spark" : ""));
    if (column === "state") td.appendChild(document.createElement("span"));
    tr.appendChild(td);
  }
  cell(tr, "server").textContent = name;
  tr.appendChild(element("td", "actions"));
  tr.addEventListener("click", () => openDetail(name));
  tr.addEventListener("keydown", (event) => { if (event.key === "Enter") openDetail(name); });
  return tr;
}

function setActions(tr, on) {
  const td = cell(tr, "actions");
  td.hidden = !on;
  if (!on) { td.replaceChildren(); return; }
  if (td.childElementCount) return;
  for (const action of ACTIONS) {
    const button = element("button", "", action);
    button.type = "button";
    button.dataset.action = action;
    button.addEventListener("click", (event) => { event.stopPropagation(); operate(tr.dataset.server, action); });
    td.appendChild(button);
  }
}

function render(status) {
  lastStatus = status;
  controls = status.controls;
  document.querySelector("th.actions").hidden = !controls;
  const registry = status.registry;
  document.getElementById("registry").textContent = registry.tools + " tools, registry version " + registry.version;
  const body = document.getElementById("servers");
  const seen = new Set();
  status.servers.forEach((row, index) => {
    seen.add(row.server);
    let tr = rows.get(row.server);
    if (!tr) { tr = newRow(row.server); rows.set(row.server, tr); drawSparks(tr); }
    if (body.children[index] !== tr) body.insertBefore(tr, body.children[index] || null);  // config order
    const calls = status.calls[row.server] || {per_second: 0, p50: null, p99: null};
    setState(tr, row.state);
    cell(tr, "restarts").textContent = row.restarts;
    cell(tr, "tools").textContent = row.tools;
    const sandbox = cell(tr, "sandbox");  // how the server is confined: "sandboxed: ...", or not
    sandbox.textContent = row.sandbox ? row.sandbox.replace(/^sandboxed: /, "") : "none";
    sandbox.title = row.sandbox || "not sandboxed";
    cell(tr, "per_second").textContent = calls.per_second.toFixed(1);
    cell(tr, "p50").textContent = duration(calls.p50);
    cell(tr, "p99").textContent = duration(calls.p99);
    setError(tr, row.last_error);
    setActions(tr, controls);
  });
  for (const [name, tr] of rows) {
    if (!seen.has(name)) { tr.remove(); rows.delete(name); }
  }
  renderTotals();
}

function renderTotals() {
  if (!lastStatus) return;
  const states = new Map();
  let rate = 0;
  for (const row of lastStatus.servers) {
    states.set(row.state, (states.get(row.state) || 0) + 1);
    rate += (lastStatus.calls[row.server] || {per_second: 0}).per_second;
  }
  const chips = [];
  for (const [state, count] of states) {
    const chip = element("span", "chip", count + " " + state);
    chip.dataset.state = state;
    chips.push(chip);
  }
  document.getElementById("by-state").replaceChildren(...chips);
  document.getElementById("total-rate").textContent = rate.toFixed(1);
  let errors = 0;
  if (lastHistory) {
    for (const series of Object.values(lastHistory.servers)) errors += series.errors.reduce((a, b) => a + b, 0);
  }
  document.getElementById("total-errors").textContent = errors;
  document.getElementById("errors-word").textContent = errors === 1 ? "error" : "errors";
}

function load() {
  if (loading) return loading;
  loading = fetch("/api/status", {cache: "no-store"})
    .then((response) => response.json())
    .then(render)
    .catch((error) => say("could not load the status: " + error, true))
    .finally(() => { loading = null; });
  return loading;
}

async function operate(server, action) {
  say(action + " " + server + " ...", false);
  try {
    const response = await fetch("/api/servers/" + encodeURIComponent(server) + "/" + action, {
      method: "POST",
      headers: {"X-Requested-By": "mcp-supervisor"},
    });
    const answer = await response.json();
    if (response.ok) say(action + " " + server + ": done", false);
    else say(action + " " + server + ": " + answer.error, true);
  } catch (error) {
    say(action + " " + server + ": " + error, true);
  }
}

// --- the sparklines: the last POINTS buckets (an hour of minutes by default), one bucket a point

function bucketSpan(index, count) {  // the bucket's start and end, and how long it has run
  const end = lastHistory.end - (count - 1 - index) * lastHistory.bucket;
  const start = end - lastHistory.bucket;
  const now = Date.now() / 1000;
  return {start, end, seconds: Math.max(1, Math.min(lastHistory.bucket, now - start))};
}

function line(values, top, className, dots) {  // a path through the non-null values, broken at nulls;
  const step = SPARK.width / values.length;  // a value alone between nulls is a dot (in ``dots``)
  const scale = (SPARK.height - 2) / (top || 1);
  const point = (index) => [(index + 0.5) * step, SPARK.height - 1 - values[index] * scale];
  let d = "";
  values.forEach((value, index) => {
    if (value === null) return;
    const [x, y] = point(index);
    const joined = index > 0 && values[index - 1] !== null;
    d += (joined ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
    const alone = !joined && (index === values.length - 1 || values[index + 1] === null);
    if (alone && dots) dots.push(svgElement("circle", {cx: x.toFixed(1), cy: y.toFixed(1), r: 1.6}, "dot" + className.slice(1)));
  });
  return svgElement("path", {d: d || "M0 0"}, className);
}

function spark(values, label, kind) {
  const box = {viewBox: `0 0 ${SPARK.width} ${SPARK.height}`, preserveAspectRatio: "none", role: "img"};
  const svg = svgElement("svg", box, "spark " + kind);  // drawn to the width CSS gives it
  svg.dataset.kind = kind;
  svg.appendChild(svgElement("line", {x1: 0, x2: SPARK.width, y1: SPARK.height - 0.5, y2: SPARK.height - 0.5}, "base"));
  const count = values.calls.length;
  const step = SPARK.width / count;
  if (kind === "calls") {
    const top = Math.max(...values.calls);
    const path = line(values.calls, top, "calls");
    const area = svgElement("path", {d: path.getAttribute("d") + `L${SPARK.width - step / 2} ${SPARK.height}L${step / 2} ${SPARK.height}Z`}, "area");
    svg.append(area, path);
  } else if (kind === "latency") {
    const top = Math.max(0, ...values.p99.filter((v) => v !== null));
    const dots = [];
    svg.append(line(values.p99, top, "p99", dots), line(values.p50, top, "p50", dots), ...dots);
  } else {
    const top = Math.max(1, ...values.errors);
    values.errors.forEach((errors, index) => {
      if (!errors) return;
      const height = Math.max(2, errors / top * (SPARK.height - 2));
      svg.appendChild(svgElement("rect", {x: index * step, y: SPARK.height - height, width: Math.max(1, step - 0.4), height}, "errors"));
    });
  }
  for (let index = 0; index < count; index++) {
    const span = bucketSpan(index, count);
    const hit = svgElement("rect", {x: index * step, y: 0, width: step, height: SPARK.height}, "hit");
    const fine = lastHistory.bucket < 60;  // seconds in the times when a bucket is shorter than a minute
    svg.appendChild(titled(hit, clock(span.start, fine) + "–" + clock(span.end, fine) + ": " + label(index, span)));
  }
  return svg;
}

function callsLabel(series) {
  return (index, span) => plural(series.calls[index], "call") + ", " + (series.calls[index] / span.seconds).toFixed(2) + "/s";
}

function latencyLabel(series) {
  return (index) => series.calls[index]
    ? "p50 " + duration(series.p50[index]) + ", p99 " + duration(series.p99[index])
    : "no calls";
}

function errorsLabel(series) {
  return (index) => plural(series.errors[index], "error") + " of " + plural(series.calls[index], "call");
}

function drawSparks(tr) {
  if (!lastHistory) return;
  const series = lastHistory.servers[tr.dataset.server];
  if (!series) return;
  const last = lastWords(chartSpan());
  const summary = {
    calls: "calls in " + last + ": " + series.calls.reduce((a, b) => a + b, 0),
    latency: "p50 (green) and p99 (orange) of each " + bucketName(lastHistory.bucket),
    errors: "errors in " + last + ": " + series.errors.reduce((a, b) => a + b, 0),
  };
  cell(tr, "spark_calls").replaceChildren(titled(spark(series, callsLabel(series), "calls"), summary.calls));
  cell(tr, "spark_latency").replaceChildren(titled(spark(series, latencyLabel(series), "latency"), summary.latency));
  cell(tr, "spark_errors").replaceChildren(titled(spark(series, errorsLabel(series), "errors"), summary.errors));
}

async function loadHistory() {
  try {
    const answer = await getJSON("/api/history");
    if (!answer.ok) throw new Error(answer.body.error);
    const bucket = bucketSeconds();
    lastHistory = answer.body;
    if (lastHistory.bucket !== bucket) { relabel(); drawAxis(); }  // views.js
    for (const tr of rows.values()) drawSparks(tr);
    renderTotals();
  } catch (error) {
    say("could not load the history: " + error, true);
  }
}

// --- the live feed

function listen() {
  const events = new EventSource("/events");
  const live = document.getElementById("live");
  let lost = false;
  events.onopen = () => {
    live.dataset.live = "yes";
    live.textContent = "live";
    if (lost) { load(); loadTimeline(); }  // events were missed while the stream was down
  };
  events.onerror = () => {
    lost = true;
    live.dataset.live = "no";
    live.textContent = "reconnecting";
  };
  events.addEventListener("state", (event) => {
    const change = JSON.parse(event.data);
    const tr = rows.get(change.server);
    if (!tr) { load(); return; }
    setState(tr, change.state);
    cell(tr, "restarts").textContent = change.restarts;
    setError(tr, change.last_error);
    if (lastStatus) {
      const row = lastStatus.servers.find((one) => one.server === change.server);
      if (row) { row.state = change.state; renderTotals(); }
    }
    detailChanged(change.server);
  });
  events.addEventListener("registry", (event) => {
    const change = JSON.parse(event.data);
    const tr = rows.get(change.server);
    if (tr) cell(tr, "tools").textContent = change.tools;
    detailChanged(change.server);
  });
  events.addEventListener("timeline", (event) => addToTimeline(JSON.parse(event.data)));
  events.addEventListener("stats", (event) => render(JSON.parse(event.data)));
}

function historyTick() {  // the history again, once a bucket (at most every HISTORY_EVERY ms, at least every second)
  loadHistory().finally(() => setTimeout(historyTick, Math.min(HISTORY_EVERY, Math.max(1000, bucketSeconds() * 1000))));
}

function start() {
  load().then(historyTick);
  startViews();  // views.js
  listen();
}

document.addEventListener("DOMContentLoaded", start);
