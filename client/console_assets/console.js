// dtrain console: the pages' code. Everything comes from the console's own /api (console.h);
// charts are Debian's dygraphs, embedded beside this file; curve.js (loaded first on every page)
// decides which steps of a curve they draw. Proto JSON: field names as in
// proto/*.proto, 64-bit integers as strings, enums by name.
"use strict";

const FINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

async function api(path, options) {
  const response = await fetch("/api/" + path, options);
  const body = await response.json().catch(() => ({error: response.statusText}));
  if (!response.ok) {
    const e = new Error(body.error || response.statusText);
    e.code = body.code;
    e.status = response.status;
    throw e;
  }
  return body;
}

function showError(e) {
  const p = $("error");
  p.hidden = !e;
  p.textContent = e ? (e.code ? e.code + ": " : "") + e.message : "";
}

function num(x) { return x === undefined || x === null || x === "" ? 0 : Number(x); }
function fmt(x, digits) { return x ? x.toFixed(digits) : "–"; }

function age(unixMs) {
  const s = Math.max(0, (Date.now() - num(unixMs)) / 1000);
  if (!num(unixMs)) return "–";
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function layoutOf(spec) {
  const p = (spec && spec.parallel) || {};
  return [p.dp || 1, p.pp || 1, p.tp || 1];
}

function bytes(n) {
  n = num(n);
  if (n >= 2 ** 30) return (n / 2 ** 30).toFixed(1) + " GiB";
  if (n >= 2 ** 20) return (n / 2 ** 20).toFixed(0) + " MiB";
  return n + " B";
}

let whoami = null;
async function loadWhoami() {
  whoami = await api("whoami");
  $("whoami").textContent = "as " + whoami.identity + " · coordinator " + whoami.coordinator;
  document.body.dataset.mayCancel = whoami.may_cancel ? "1" : "0";
  document.body.dataset.mayDrain = whoami.may_drain ? "1" : "0";
}

// --- jobs ---------------------------------------------------------------------------------

let jobsSort = {key: "id", dir: -1};
const checkedJobs = new Set();

function updateCompareLink() {
  $("compare").href = "/compare.html?ids=" + [...checkedJobs].map(encodeURIComponent).join(",");
}

function jobRow(j) {
  const [dp, pp, tp] = layoutOf(j.spec);
  const latest = j.latest || {};
  return {
    id: j.id, name: (j.spec && j.spec.name) || "", state: j.state,
    layout: dp + "×" + pp + "×" + tp, step: num(latest.step), steps: num(j.spec && j.spec.steps),
    loss: num(latest.loss), tps: num(latest.tokens_per_s), age: num(j.submitted_unix_ms),
    queue: num(j.queue_position), reason: j.reason || "", owner: j.owner || "",
    priority: num(j.spec && j.spec.priority),
  };
}

function renderJobs(jobs) {
  const state = $("state-filter").value;
  const name = $("name-filter").value.toLowerCase();
  // "only mine": the jobs submitted with this console's certificate (Job.owner is its CN).
  const mine = $("mine-filter").checked && whoami && whoami.name;
  const rows = jobs.map(jobRow)
      .filter(r => (!state || r.state === state) && (!name || r.name.toLowerCase().includes(name)) &&
                   (!mine || r.owner === whoami.name));
  const {key, dir} = jobsSort;
  rows.sort((a, b) => (key === "age" ? b.age - a.age : a[key] < b[key] ? -1 : a[key] > b[key] ? 1 : 0) * dir);
  const body = $("jobs").tBodies[0];
  body.replaceChildren(...rows.map(r => el("tr", {"data-id": r.id, "data-state": r.state},
      el("td", {}, el("input", {type: "checkbox", checked: checkedJobs.has(r.id),
                                onchange: (e) => { e.target.checked ? checkedJobs.add(r.id) : checkedJobs.delete(r.id); updateCompareLink(); }})),
      el("td", {}, el("a", {href: "/job.html?id=" + encodeURIComponent(r.id)}, r.id)),
      el("td", {}, r.name),
      el("td", {}, r.owner),
      el("td", {class: "state " + r.state, title: r.reason},
         r.state + (r.queue ? " #" + r.queue : "")),
      el("td", {class: "num"}, r.priority),
      el("td", {}, r.layout),
      el("td", {class: "num"}, r.step + " / " + r.steps),
      el("td", {class: "num"}, fmt(r.loss, 4)),
      el("td", {class: "num"}, fmt(r.tps, 0)),
      el("td", {class: "num"}, age(r.age)))));
}

async function jobsPage() {
  const select = $("state-filter");
  for (const s of ["QUEUED", "PLACING", "RUNNING", "RECOVERING", "SUCCEEDED", "FAILED", "CANCELLED"]) {
    select.append(el("option", {value: s}, s));
  }
  let jobs = [];
  const refresh = async () => {
    try {
      jobs = (await api("jobs")).jobs || [];
      renderJobs(jobs);
      showError(null);
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      document.body.dataset.ready = "1";
    } catch (e) { showError(e); }
  };
  select.onchange = $("name-filter").oninput = $("mine-filter").onchange = () => renderJobs(jobs);
  for (const th of document.querySelectorAll("#jobs th")) {
    th.onclick = () => {
      jobsSort = {key: th.dataset.key, dir: jobsSort.key === th.dataset.key ? -jobsSort.dir : 1};
      renderJobs(jobs);
    };
  }
  // Back from a job page's delete: what became of it.
  const params = new URLSearchParams(location.search);
  if (params.get("deleted")) {
    $("deleted").textContent = "deleted " + params.get("deleted") + "; its files: " + (params.get("files") || "none");
    $("deleted").hidden = false;
  }
  await loadWhoami();
  $("mine-label").hidden = !whoami.name;
  await refresh();
  setInterval(refresh, 2000);
}

// --- workers ------------------------------------------------------------------------------

async function workersPage() {
  const refresh = async () => {
    try {
      const workers = (await api("workers")).workers || [];
      $("workers").tBodies[0].replaceChildren(...workers.map(w => el("tr",
          {"data-id": w.worker_id, "data-state": w.state},
          el("td", {}, w.worker_id),
          el("td", {class: "state " + w.state}, w.state + (w.draining && w.state === "BUSY" ? " (draining)" : "")),
          el("td", {}, (w.device && w.device.name) || ""),
          el("td", {class: "num"}, bytes(w.device && w.device.memory_bytes)),
          el("td", {}, (w.allowed_roots || []).join(", ")),
          el("td", {}, w.job_id ? el("a", {href: "/job.html?id=" + encodeURIComponent(w.job_id)}, w.job_id) : ""),
          el("td", {class: "num"}, age(w.last_heartbeat_unix_ms)),
          el("td", {}, w.address),
          el("td", {class: "actions"}, ...drainButtons(w)))));
      showError(null);
      document.body.dataset.ready = "1";
    } catch (e) { showError(e); }
  };
  workersRefresh = refresh;
  await loadWhoami();
  $("workers-actions").hidden = !whoami.may_drain;
  await refresh();
  setInterval(refresh, 2000);
}

let workersRefresh = null;

// `dtrain workers drain ID` / `undrain ID` (admins: whoami.may_drain). A drained worker takes no
// new job; the job it runs moves off it at its next sealed checkpoint, asked for at once.
function drainButtons(w) {
  if (!whoami || !whoami.may_drain || w.state === "LOST") return [];
  const id = encodeURIComponent(w.worker_id);
  if (w.draining || w.state === "DRAINED") {
    return [el("button", {class: "undrain", onclick: () => drainWorker(id, "undrain")}, "Undrain")];
  }
  return [el("button", {class: "drain", onclick: () => drainWorker(id, "drain")}, "Drain")];
}

async function drainWorker(id, action) {
  if (action === "drain" &&
      !confirm("Drain " + decodeURIComponent(id) + "? It takes no new job; its job moves off it at its next checkpoint.")) {
    return;
  }
  try {
    await api("workers/" + id + "/" + action,
              {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    showError(null);
    if (workersRefresh) await workersRefresh();
  } catch (e) { showError(e); }
}

// --- a job's steps -------------------------------------------------------------------------

// A job's history of steps for its charts. The coordinator thins a long one (GetJobSteps: about
// HISTORY_STEPS of its steps, each bucket's lowest and highest loss and tokens/s, the evaluated
// steps, both ends), so a job of millions of steps loads in one answer; a zoom into that part
// asks for the window again, whole when it holds at most HISTORY_STEPS steps. The steps after
// the history come on the watch stream, every one (after_step: the history's last).
const HISTORY_STEPS = 4000;
// Steps a page holds before it thins them again (curve.js compactSeries): a page left open on a
// running job for a month stays at a few MB.
const HELD_STEPS_MAX = 4 * HISTORY_STEPS;

class History {
  // hold(u): keep a step line (the watch stream's form); redraw(): draw again soon.
  constructor(id, hold, redraw) {
    this.id = id;
    this.hold = hold;
    this.redraw = redraw;
    this.thinnedThrough = 0;  // the history up to this step came thinned
    this.asked = new Set();   // windows fetched again
  }
  // Loads the history; its last step (0: none yet), after which the watch stream goes on.
  async load() {
    const r = await this.fetch(0, 0);
    const last = r.steps.length ? r.steps[r.steps.length - 1].step : 0;
    if (r.recorded > r.steps.length) this.thinnedThrough = last;
    return last;
  }
  // The page thinned the steps it held through `step` (compactSeries): a zoom there asks again.
  thinned(step) {
    if (!step) return;
    this.thinnedThrough = Math.max(this.thinnedThrough, step);
    this.asked.clear();
  }
  // A chart zoomed to `view` ([lo, hi] or null): its window of the thinned part, once.
  async zoom(view) {
    if (!view || view[0] > this.thinnedThrough) return;
    const after = Math.max(0, Math.floor(view[0]) - 1);
    const until = Math.max(after + 1, Math.min(Math.ceil(view[1]), this.thinnedThrough));
    const key = after + ":" + until;
    if (this.asked.has(key)) return;
    this.asked.add(key);
    try {
      const r = await this.fetch(after, until);
      this.zoomed = {window: [after, until], steps: r.steps.length};
      this.redraw();
    } catch (e) { showError(e); }
  }
  async fetch(after, until) {
    const r = await api("jobs/" + encodeURIComponent(this.id) + "/steps?after_step=" + after +
                        "&until_step=" + until + "&max_steps=" + HISTORY_STEPS);
    for (const u of r.steps) this.hold(u);
    return r;
  }
  // What the page shows of it (for tests): the thinned part, the last window fetched again.
  describe(node) {
    node.dataset.thinnedThrough = this.thinnedThrough;
    if (this.zoomed) node.dataset.zoomFetched = JSON.stringify(this.zoomed.window.concat([this.zoomed.steps]));
  }
}

// --- one job ------------------------------------------------------------------------------

const steps = new StepSeries();  // step -> [loss, tokens/s, val_loss or null] (curve.js)
const evaluated = new StepSeries();  // step -> val_loss, the steps with an evaluation
const views = {};  // chart id -> the step range zoomed into, or null
let history = null;  // the job's History
let job = null;
let workersById = {};
let charts = {};

// The curves' marks: each recovery at the last step before it (R1, R2...), each sealed
// checkpoint kept (C), each rank flagged a straggler now at the end of its window (S).
let sealedSteps = [];  // ListCheckpoints' steps
function annotations(series) {
  const marks = [];
  const add = (x, shortText, text, cssClass, more) => {
    if (steps.has(x)) marks.push(Object.assign({series, x, shortText, text, cssClass, width: 22, height: 16}, more));
  };
  for (const r of (job && job.recoveries) || []) {
    add(num(r.last_step), "R" + r.number, "recovery " + r.number + ": " + r.cause, "mark-recovery");
  }
  for (const x of sealedSteps) {
    add(x, "C", "checkpoint sealed at step " + x, "mark-checkpoint", {width: 16, attachAtBottom: true});
  }
  for (const t of (job && job.stragglers) || []) {
    if (t.flagged) {
      add(num(t.window_end_step), "S", "straggler: rank " + t.rank + " (" + t.worker_id + ", " + t.label +
          ") " + num(t.score).toFixed(1) + "x its peers' median", "mark-straggler", {width: 16, tickHeight: 30});
    }
  }
  // dygraphs wants them in x order.
  return marks.sort((a, b) => a.x - b.x);
}

// The test of the steps a page keeps when it thins what it holds (curve.js compactSeries calls
// this only then): evaluated, marked (annotations), and inside a chart's zoomed window.
function pinnedSteps() {
  const marked = new Set([...sealedSteps,
                          ...((job && job.recoveries) || []).map(r => num(r.last_step)),
                          ...((job && job.stragglers) || []).map(t => num(t.window_end_step))]);
  const windows = Object.values(views).filter(v => v);
  return x => evaluated.has(x) || marked.has(x) || windows.some(v => x >= v[0] && x <= v[1]);
}

// A chart's width in buckets of decimation (curve.js): two steps a pixel at most.
function bucketsOf(node) { return Math.max(200, node.clientWidth || 800); }

// The curve settings the browser keeps for every page and visit (localStorage; null when it has
// none or refuses).
const SMOOTHING_KEY = "dtrain.smoothing", LOG_SCALE_KEY = "dtrain.logscale";
function keptSetting(key) {
  try { return localStorage.getItem(key); } catch (e) { return null; }
}
function keepSetting(key, value) {
  try { localStorage.setItem(key, value); } catch (e) { /* storage refused: this page only */ }
}

// A page's curve controls: the smoothing slider (#smoothing, its value in #smoothing-value; the
// weight of curve.js smooth for its loss curves) and the `log scale` box (#log-scale), each
// kept (keepSetting). Returns the getters; onChange redraws.
function curveControls(onChange) {
  const input = $("smoothing"), box = $("log-scale");
  let weight = clampSmoothing(keptSetting(SMOOTHING_KEY));
  box.checked = keptSetting(LOG_SCALE_KEY) === "1";
  const show = () => {
    input.value = weight;
    $("smoothing-value").textContent = weight.toFixed(2);
    document.body.dataset.smoothing = weight;
    document.body.dataset.logscale = box.checked ? "1" : "0";
  };
  show();
  input.oninput = () => {
    weight = clampSmoothing(input.value);
    keepSetting(SMOOTHING_KEY, String(weight));
    show();
    onChange();
  };
  box.onchange = () => {
    keepSetting(LOG_SCALE_KEY, box.checked ? "1" : "0");
    show();
    onChange();
  };
  return {weight: () => weight, logScale: () => box.checked};
}
let lossControls = {weight: () => 0, logScale: () => false};  // the job page's (curveControls)

// The loss chart's series: the loss (faded when smoothed), its smoothed trend, val_loss.
const LOSS_COLOR = "rgb(31, 119, 180)", FADED_LOSS_COLOR = "rgba(31, 119, 180, 0.3)";
const VAL_LOSS_COLOR = "rgb(214, 39, 40)";

function drawCharts() {
  const xs = steps.steps();
  // The loss chart gains a val_loss series (JobSpec.eval) once an evaluation has reported.
  const evals = evaluated.steps();
  for (const [id, label, index] of [["loss-chart", "loss", 0], ["tps-chart", "tokens/s", 1]]) {
    const withVal = index === 0 && evals.length > 0;
    const node = $(id);
    if (xs.length === 0) { node.textContent = "no steps yet"; continue; }
    const value = x => steps.get(x)[index];
    const marks = annotations(label);
    // The evaluations (decimated the same way) and every marked step too (a mark needs its row).
    const shown = new Set(stepsToDraw(xs, value, views[id], bucketsOf(node)));
    if (withVal) {
      for (const x of stepsToDraw(evals, x => evaluated.get(x), views[id], bucketsOf(node))) shown.add(x);
    }
    for (const m of marks) shown.add(m.x);
    const drawn = [...shown].sort((a, b) => a - b);
    // The loss's trend, from every step the page holds (not only those drawn).
    const weight = index === 0 ? lossControls.weight() : 0;
    const trend = weight > 0 ? smooth(xs, value, weight) : null;
    const trendLabel = label + " (smoothed " + weight.toFixed(2) + ")";
    const data = drawn.map(x => [x, steps.get(x)[index], ...(trend ? [trend.get(x)] : []),
                                 ...(withVal ? [steps.get(x)[2]] : [])]);
    const labels = ["step", label, ...(trend ? [trendLabel] : []), ...(withVal ? ["val_loss"] : [])];
    const look = index !== 0 ? {} : {
      colors: [trend ? FADED_LOSS_COLOR : LOSS_COLOR, ...(trend ? [LOSS_COLOR] : []),
               ...(withVal ? [VAL_LOSS_COLOR] : [])],
      series: trend ? {[trendLabel]: {strokeWidth: 2, drawPoints: false}} : {},
      logscale: lossControls.logScale(),
    };
    if (!charts[id]) {
      node.textContent = "";
      charts[id] = new Dygraph(node, data, {labels, ...look, xlabel: "step", ylabel: label,
                                            drawPoints: data.length < 200, strokeWidth: 1.5,
                                            connectSeparatedPoints: true,
                                            animatedZooms: false, legend: "follow",
                                            // Zoomed in: drawn again from every step in the window.
                                            zoomCallback: (lo, hi) => {
                                              views[id] = charts[id].isZoomed("x") ? [lo, hi] : null;
                                              if (history) history.zoom(views[id]);
                                              scheduleDraw();
                                            }});
    } else {
      charts[id].updateOptions({file: data, labels, ...look, drawPoints: data.length < 200});
    }
    if (index === 0) node.dataset.valPoints = evals.length;
    node.dataset.series = labels.slice(1).join(",");
    charts[id].setAnnotations(marks);
    node.dataset.points = xs.length;  // steps held
    if (history) history.describe(node);
    node.dataset.drawn = charts[id].numRows();
    node.dataset.marks = marks.length;
  }
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  setTimeout(() => { drawPending = false; drawCharts(); }, 200);
}

function cellHealth(rank) {
  if (FINAL.has(job.state)) return "ended";
  const w = workersById[rank.worker_id];
  if (!w || w.state === "LOST") return "lost";
  const score = ((job.stragglers) || []).find(s => s.worker_id === rank.worker_id);
  if (score && score.flagged) return "straggler";
  return w.state === "BUSY" && w.job_id === job.id ? "healthy" : "unknown";
}

function drawGrid() {
  const ranks = (job.placement && job.placement.ranks) || [];
  const [dp, pp, tp] = layoutOf(job.spec);
  $("grid-layout").textContent = "dp " + dp + " × pp " + pp + " × tp " + tp;
  const grid = $("grid");
  if (ranks.length === 0) { grid.textContent = "not placed"; return; }
  const blocks = new Map();
  ranks.forEach((r, index) => {
    const d = num(r.dp_rank);
    if (!blocks.has(d)) blocks.set(d, []);
    blocks.get(d).push([index, r]);
  });
  grid.replaceChildren(...[...blocks.keys()].sort((a, b) => a - b).map(d => {
    const block = el("div", {class: "replica"}, el("div", {class: "replica-name"}, "dp " + d));
    const table = el("div", {class: "stages"});
    table.style.gridTemplateColumns = "repeat(" + (1 + Math.max(...blocks.get(d).map(([, r]) => num(r.tp_rank)))) + ", auto)";
    for (const [index, r] of blocks.get(d)) {
      const health = cellHealth(r);
      table.append(el("div", {class: "cell " + health, "data-rank": index, "data-dp": d,
                              "data-pp": num(r.pp_rank), "data-tp": num(r.tp_rank),
                              "data-worker": r.worker_id, "data-health": health,
                              title: "rank " + index + " on " + r.worker_id + " (" + r.worker_address + ")"},
                      el("b", {}, "pp" + num(r.pp_rank) + " tp" + num(r.tp_rank)), el("br"),
                      r.worker_id));
    }
    block.append(table);
    return block;
  }));
}

function drawJob() {
  $("job-id").textContent = job.id;
  $("job-name").textContent = (job.spec && job.spec.name) || "";
  $("job-state").textContent = job.state;
  $("job-state").className = "state " + job.state;
  document.body.dataset.state = job.state;
  const position = !job.queue_position ? ""
      : job.queue_position === 1 ? "next in the queue; " : "position " + job.queue_position + " in the queue; ";
  $("job-reason").textContent = position + (job.reason || "");
  const latest = job.latest || {};
  $("job-summary").textContent = "step " + num(latest.step) + " / " + num(job.spec && job.spec.steps) +
      " · loss " + fmt(num(latest.loss), 4) + " · " + fmt(num(latest.tokens_per_s), 0) + " tokens/s" +
      " · submitted " + age(job.submitted_unix_ms) + " ago" + (job.owner ? " by " + job.owner : "") +
      " · priority " + num(job.spec && job.spec.priority);
  const actions = $("actions");
  actions.replaceChildren();
  // What the coordinator allows on this job (a user acts only on its own): GET .../access.
  const mayOnJob = new Set((jobAccess && jobAccess.methods) || []);
  document.body.dataset.refused = Object.keys((jobAccess && jobAccess.refused) || {}).join(",");
  if (mayOnJob.has("CancelJob") && !FINAL.has(job.state)) {
    actions.append(el("button", {id: "cancel", onclick: cancelJob}, "Cancel job"));
  }
  // `dtrain priority`: its own field, kept while being typed in (this redraws at every update).
  const priority = num(job.spec && job.spec.priority);
  document.body.dataset.priority = priority;
  $("priority-control").hidden = !(mayOnJob.has("SetJobPriority") && !FINAL.has(job.state));
  if (document.activeElement !== $("priority-input")) $("priority-input").value = priority;
  if (mayOnJob.has("CheckpointJob") && job.state === "RUNNING") {
    actions.append(el("button", {id: "checkpoint-now", onclick: checkpointNow}, "Checkpoint now"));
  }
  if (mayOnJob.has("DeleteJob") && FINAL.has(job.state)) {
    actions.append(el("button", {id: "delete", onclick: deleteJob}, "Delete job and files"));
  }
  if (whoami.may_submit) {
    actions.append(el("button", {id: "resubmit", onclick: () => resubmitJob(false)}, "Resubmit"));
    // Only once it has ended: until then its retention may remove the step a copy waits for.
    if (FINAL.has(job.state) && num(job.checkpoint && job.checkpoint.last_sealed_step) > 0) {
      actions.append(el("button", {id: "resume", onclick: () => resubmitJob(true)},
                        "Resume from step " + num(job.checkpoint.last_sealed_step)));
    }
  }
  $("history").tBodies[0].replaceChildren(...(job.history || []).map(h => el("tr", {},
      el("td", {}, new Date(num(h.time_unix_ms)).toLocaleString()),
      el("td", {class: "state " + h.state}, h.state), el("td", {}, h.reason))));
  $("recoveries").tBodies[0].replaceChildren(...(job.recoveries || []).map(r => {
    const l = r.layout || {};
    return el("tr", {"data-number": r.number},
        el("td", {}, r.number), el("td", {}, r.cause), el("td", {}, r.failed_worker),
        el("td", {class: "num"}, num(r.last_step)), el("td", {class: "num"}, num(r.resumed_from_step)),
        el("td", {}, (l.dp || 1) + "×" + (l.pp || 1) + "×" + (l.tp || 1)), el("td", {}, r.done ? "yes" : "no"));
  }));
  drawGrid();
  scheduleDraw();
}

let jobAccess = null;  // Coordinator.Access for the job of this page
async function refreshJob(id) {
  try {
    const [j, w, c] = await Promise.all([api("jobs/" + encodeURIComponent(id)), api("workers"),
                                         api("jobs/" + encodeURIComponent(id) + "/checkpoints").catch(() => ({}))]);
    job = j;
    // Once per page: the job's owner and this certificate's role do not change.
    if (!jobAccess) jobAccess = await api("jobs/" + encodeURIComponent(id) + "/access");
    sealedSteps = ((c.checkpoints) || []).map(x => num(x.step));
    workersById = Object.fromEntries(((w.workers) || []).map(x => [x.worker_id, x]));
    drawJob();
    showError(null);
  } catch (e) { showError(e); }
}

async function jobPage() {
  const id = new URLSearchParams(location.search).get("id");
  $("set-priority").onclick = setPriority;
  const holdStep = (u) => {
    steps.set(u.step, [u.loss, u.tokens_per_s, u.val_loss === undefined ? null : u.val_loss]);
    if (u.val_loss !== undefined) evaluated.set(u.step, u.val_loss);
  };
  history = new History(id, holdStep, scheduleDraw);
  lossControls = curveControls(scheduleDraw);
  let last = 0;
  try { last = await history.load(); } catch (e) { showError(e); }  // the stream says it too
  const stream = new EventSource("/api/jobs/" + encodeURIComponent(id) + "/watch?after_step=" + last);
  let refreshPending = false;
  const refreshSoon = () => {
    if (refreshPending || !job) return;
    refreshPending = true;
    setTimeout(async () => { refreshPending = false; await refreshJob(id); }, 300);
  };
  stream.addEventListener("steps", (message) => {
    for (const u of JSON.parse(message.data)) holdStep(u);
    history.thinned(compactSeries(steps, [x => steps.get(x)[0], x => steps.get(x)[1]],
                                  HISTORY_STEPS / 4, HELD_STEPS_MAX, pinnedSteps));
    scheduleDraw();
  });
  stream.onmessage = (message) => {
    const u = JSON.parse(message.data);
    if (u.type === "state" || u.type === "job") {  // "job": a queued job's new place
      refreshSoon();
    } else if (u.type === "event") {
      $("events").append(el("li", {}, u.text));
      refreshSoon();
    }
  };
  stream.addEventListener("end", async () => {
    stream.close();
    const ended = performance.now();
    await refreshJob(id);
    drawCharts();
    // How long the page took to show the whole job: from navigation to the curves drawn.
    document.body.dataset.streamMs = Math.round(ended);
    document.body.dataset.loadMs = Math.round(performance.now());
    document.body.dataset.complete = "1";
  });
  stream.addEventListener("failed", (message) => {
    stream.close();
    const e = JSON.parse(message.data);
    showError({code: e.code, message: e.error});
  });
  await loadWhoami();
  await refreshJob(id);
  if (!job) { stream.close(); return; }
  document.title = "dtrain console: " + job.id;
  $("diagnose-button").onclick = diagnose;
  $("plan-button").onclick = showPlan;
  $("sample-button").onclick = sampleJob;
  $("trace-button").onclick = traceStep;
  $("logs-button").onclick = showLogs;
  $("show-collectives").onchange = (e) => $("gantt").classList.toggle("show-collectives", e.target.checked);
  // Placement health follows the workers' heartbeats; a log on show follows the job.
  setInterval(() => {
    if (FINAL.has(job.state)) return;
    refreshJob(id);
    if ($("logs").dataset.entries !== undefined) showLogs();
  }, 2000);
  document.body.dataset.ready = "1";
}

// --- several jobs' loss curves on one chart -----------------------------------------------

async function comparePage() {
  await loadWhoami();
  const ids = (new URLSearchParams(location.search).get("ids") || "").split(",").filter(x => x);
  if (ids.length === 0) {
    $("compared").textContent = "Check jobs on the jobs page, then follow its compare link.";
    return;
  }
  const losses = ids.map(() => new StepSeries());  // per job: step -> loss (curve.js)
  const node = $("compare-chart");
  let chart = null;
  let view = null;  // the step range zoomed into
  let ended = 0;
  const draw = () => {
    // Each job's curve decimated on its own (curve.js), the union drawn; smoothed (each job's
    // trend from every step held of it) unless the slider is at 0.
    const shown = new Set();
    for (const m of losses) {
      for (const x of stepsToDraw(m.steps(), x => m.get(x), view, bucketsOf(node))) shown.add(x);
    }
    const xs = [...shown].sort((a, b) => a - b);
    if (xs.length === 0) return;
    const weight = controls.weight();
    const curves = losses.map(m => weight > 0 ? smooth(m.steps(), x => m.get(x), weight) : m);
    const data = xs.map(x => [x, ...curves.map(c => c.has(x) ? c.get(x) : null)]);
    if (!chart) {
      chart = new Dygraph(node, data, {labels: ["step", ...ids], xlabel: "step", ylabel: "loss",
                                       logscale: controls.logScale(),
                                       connectSeparatedPoints: true, legend: "always", strokeWidth: 1.5,
                                       zoomCallback: (lo, hi) => {
                                         view = chart.isZoomed("x") ? [lo, hi] : null;
                                         for (const h of histories) h.zoom(view);
                                         scheduleCompareDraw();
                                       }});
    } else {
      chart.updateOptions({file: data, logscale: controls.logScale()});
    }
    node.dataset.series = chart.getLabels().length - 1;
    node.dataset.smoothing = weight;
    node.dataset.points = JSON.stringify(losses.map(m => m.size));
    node.dataset.drawn = chart.numRows();
  };
  let pending = false;
  const scheduleCompareDraw = () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; draw(); }, 200);
  };
  const controls = curveControls(scheduleCompareDraw);
  $("compared").textContent = ids.join(" · ");
  const histories = ids.map((id, i) => new History(id, u => losses[i].set(u.step, u.loss),
                                                   scheduleCompareDraw));
  ids.forEach(async (id, i) => {
    let last = 0;
    try { last = await histories[i].load(); } catch (e) { showError(e); }  // the stream says it too
    const stream = new EventSource("/api/jobs/" + encodeURIComponent(id) + "/watch?after_step=" + last);
    stream.addEventListener("steps", (message) => {
      for (const u of JSON.parse(message.data)) losses[i].set(u.step, u.loss);
      const inView = () => x => view && x >= view[0] && x <= view[1];
      histories[i].thinned(compactSeries(losses[i], [x => losses[i].get(x)], HISTORY_STEPS / 4,
                                         HELD_STEPS_MAX, inView));
      scheduleCompareDraw();
    });
    const done = () => {
      stream.close();
      if (++ended === ids.length) { draw(); document.body.dataset.complete = "1"; }
    };
    stream.addEventListener("end", done);
    stream.addEventListener("failed", (message) => {
      const e = JSON.parse(message.data);
      showError({code: e.code, message: id + ": " + e.error});
      done();
    });
  });
  document.body.dataset.ready = "1";
}

const PAGES = {jobs: jobsPage, workers: workersPage, job: jobPage, compare: comparePage};
PAGES[document.body.dataset.page]().catch(showError);
