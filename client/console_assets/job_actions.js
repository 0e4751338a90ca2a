// dtrain console: the job page's actions, one function per button (cancel, delete, diagnose,
// trace, plan, sample, checkpoint, priority, resubmit, log). Loaded by job.html before
// console.js, whose jobPage wires them; they use its globals (api, $, el, job, drawJob,
// showError) when clicked.

async function cancelJob() {
  if (!confirm("Cancel " + job.id + "? Its ranks stop; a sealed checkpoint can be resumed.")) return;
  try {
    job = await api("jobs/" + encodeURIComponent(job.id) + "/cancel",
                    {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    showError(null);
    drawJob();
  } catch (e) { showError(e); }
}

// `dtrain delete --files`: its records go, and its directory through a worker on its host. The
// list page says what became of the files.
async function deleteJob() {
  const dir = job.checkpoint && job.checkpoint.dir;
  if (!confirm("Delete " + job.id + (dir ? " and its directory " + dir + " (checkpoints, weights)" : "") +
               "? This cannot be undone.")) return;
  try {
    const r = await api("jobs/" + encodeURIComponent(job.id) + "/delete?files=1",
                        {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    const files = r.files ? r.files.state + (r.files.error ? ": " + r.files.error : "") : "no files";
    location.href = "/?deleted=" + encodeURIComponent(job.id) + "&files=" + encodeURIComponent(files);
  } catch (e) {
    document.body.dataset.deleteError = e.message;  // (#error is cleared by the next refresh)
    showError(e);
  }
}

async function diagnose() {
  $("diagnosis-summary").textContent = "asking every rank…";
  try {
    const d = await api("jobs/" + encodeURIComponent(job.id) + "/diagnose");
    $("diagnosis-summary").textContent = d.summary;
    $("findings").replaceChildren(...(d.findings || []).map(f => el("li", {}, f)));
    const table = $("diagnosis");
    table.hidden = false;
    table.tBodies[0].replaceChildren(...(d.ranks || []).map(r => el("tr",
        {"data-rank": r.rank, class: (d.root_ranks || []).includes(r.rank) ? "root" : ""},
        el("td", {}, r.rank + " " + r.label), el("td", {}, r.worker_id),
        el("td", {}, r.answered ? "yes" : "no: " + r.error), el("td", {}, r.doing),
        el("td", {class: "num"}, fmt(num(r.doing_seconds), 1) + " s"),
        el("td", {}, (r.waits_on || []).join(", ")),
        el("td", {class: "num"}, num(r.heartbeat_age_seconds) < 0 ? "?" : fmt(num(r.heartbeat_age_seconds), 1) + " s"))));
  } catch (e) {
    // Here, not in #error: the job's periodic refresh clears that.
    $("diagnosis-summary").textContent = (e.code ? e.code + ": " : "") + e.message;
    $("diagnosis").hidden = true;
  }
}

// One step of every rank (client/trace.h's Chrome trace JSON) as a Gantt chart drawn with
// Debian's d3 3.5: a row per rank and track, a bar per operation, an arrow per message.
function drawGantt(trace) {
  const events = trace.traceEvents || [];
  const process = {}, track = {};
  for (const e of events) {
    if (e.ph === "M" && e.name === "process_name") process[e.pid] = e.args.name;
    if (e.ph === "M" && e.name === "thread_name") track[e.pid + "/" + e.tid] = e.args.name;
  }
  const slices = events.filter(e => e.ph === "X");
  const keys = [...new Set(slices.map(e => e.pid + "/" + e.tid))].sort((a, b) => {
    const [pa, ta] = a.split("/").map(Number), [pb, tb] = b.split("/").map(Number);
    return pa - pb || ta - tb;
  });
  const row = Object.fromEntries(keys.map((k, i) => [k, i]));
  const labelWidth = 260, rowHeight = 18, width = 1100;
  const end = d3.max(slices, e => e.ts + e.dur) || 1;
  const x = d3.scale.linear().domain([0, end]).range([labelWidth, width - 10]);
  const y = k => 20 + row[k] * rowHeight;
  const kind = e => {
    const t = (track[e.pid + "/" + e.tid] || "").split(" ")[0];
    if (t === "F") return "op-" + e.name[0];  // F, B, b, W
    return "op-" + t;  // collectives, receives, sends, checkpoint
  };
  const node = $("gantt");
  node.textContent = "";
  const svg = d3.select(node).append("svg").attr("width", width).attr("height", 30 + keys.length * rowHeight);
  svg.append("defs").append("marker").attr("id", "arrow").attr("viewBox", "0 0 10 10")
      .attr("refX", 10).attr("refY", 5).attr("markerWidth", 6).attr("markerHeight", 6)
      .attr("orient", "auto").append("path").attr("d", "M0,0L10,5L0,10z");
  const axis = d3.svg.axis().scale(x).orient("top").ticks(8).tickFormat(us => (us / 1000).toFixed(1) + " ms");
  svg.append("g").attr("class", "axis").attr("transform", "translate(0,18)").call(axis);
  svg.selectAll("text.row").data(keys).enter().append("text").attr("class", "row")
      .attr("x", 0).attr("y", k => y(k) + 13)
      .text(k => { const [pid] = k.split("/"); return process[pid] + " · " + track[k]; });
  const bars = svg.selectAll("g.slice").data(slices).enter().append("g").attr("class", e => "slice " + kind(e));
  bars.append("rect").attr("x", e => x(e.ts)).attr("y", e => y(e.pid + "/" + e.tid) + 2)
      .attr("width", e => Math.max(1, x(e.ts + e.dur) - x(e.ts))).attr("height", rowHeight - 4)
      .append("title").text(e => e.name + ": " + (e.dur / 1000).toFixed(2) + " ms");
  bars.filter(e => x(e.ts + e.dur) - x(e.ts) > 24).append("text")
      .attr("x", e => x(e.ts) + 2).attr("y", e => y(e.pid + "/" + e.tid) + 13)
      .text(e => e.name.split(" ").slice(0, 2).join(" "));
  const starts = {}, arrows = [];
  for (const e of events) if (e.ph === "s") starts[e.id] = e;
  for (const e of events) if (e.ph === "f" && starts[e.id]) arrows.push([starts[e.id], e]);
  // Pipeline messages (activations, gradients) always; the collectives' own messages, which
  // crowd the chart, when asked for.
  const isCollective = ([s]) => s.name === "collective";
  svg.selectAll("line.flow").data(arrows).enter().append("line")
      .attr("class", a => "flow" + (isCollective(a) ? " collective" : ""))
      .attr("x1", ([s]) => x(s.ts)).attr("y1", ([s]) => y(s.pid + "/" + s.tid) + rowHeight / 2)
      .attr("x2", ([, f]) => x(f.ts)).attr("y2", ([, f]) => y(f.pid + "/" + f.tid) + rowHeight / 2)
      .attr("marker-end", "url(#arrow)");
  node.dataset.slices = slices.length;
  node.dataset.arrows = arrows.length;
  node.dataset.pipelineArrows = arrows.filter(a => !isCollective(a)).length;
  node.classList.toggle("show-collectives", $("show-collectives").checked);
  node.dataset.ranks = new Set(slices.map(e => e.pid)).size;
  const m = trace.metadata || {};
  const orders = (m.schedule_order || []).map(o => "rank " + o.rank + ": " + o.check);
  $("trace-summary").textContent = "step " + m.step + " of " + m.job_id + ", " + m.schedule +
      " over " + m.micro_batches + " micro-batches; F / B / W order as the schedule defines: " +
      (orders.join("; ") || "–");
}

async function traceStep() {
  $("trace-summary").textContent = "asking every rank…";
  try {
    drawGantt(await api("jobs/" + encodeURIComponent(job.id) + "/trace"));
  } catch (e) {
    $("trace-summary").textContent = (e.code ? e.code + ": " : "") + e.message;
  }
}

async function showPlan() {
  try {
    const p = await api("jobs/" + encodeURIComponent(job.id) + "/plan");
    $("plan").textContent = p.text;
  } catch (e) {
    $("plan").textContent = (e.code ? e.code + ": " : "") + e.message;
  }
  $("plan").hidden = false;
}

// `dtrain sample JOB`: text from the job's newest checkpoint, drawn by a worker of its host.
async function sampleJob() {
  const query = new URLSearchParams({
    tokens: $("sample-tokens").value, temperature: $("sample-temperature").value,
    top_k: $("sample-top-k").value, seed: $("sample-seed").value});
  $("sample-button").disabled = true;
  $("sample-source").textContent = "sampling…";
  try {
    const s = await api("jobs/" + encodeURIComponent(job.id) + "/sample?" + query,
                        {method: "POST", body: $("sample-prompt").value,
                         headers: {"X-Dtrain-Console": "1", "Content-Type": "text/plain; charset=utf-8"}});
    $("sample-source").textContent = (s.tokens || []).length + " tokens from " + s.source;
    $("sample-text").textContent = s.text;
    $("sample-text").hidden = false;
  } catch (e) {
    $("sample-source").textContent = (e.code ? e.code + ": " : "") + e.message;
    $("sample-text").hidden = true;
  }
  $("sample-button").disabled = false;
}

// `dtrain checkpoint JOB`: its ranks checkpoint their next step; the checkpoints' marks (C) and
// the events show the seal.
async function checkpointNow() {
  try {
    job = await api("jobs/" + encodeURIComponent(job.id) + "/checkpoint",
                    {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    showError(null);
    drawJob();
  } catch (e) { showError(e); }
}

// `dtrain priority JOB N`: the queue's order follows at once (and whom a waiting job preempts).
async function setPriority() {
  const value = $("priority-input").value.trim();
  try {
    job = await api("jobs/" + encodeURIComponent(job.id) + "/priority?value=" + encodeURIComponent(value),
                    {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    showError(null);
    $("priority-input").blur();
    drawJob();
  } catch (e) { showError(e); }
}

async function resubmitJob(resume) {
  const what = resume ? "resume " + job.id + " from its last sealed checkpoint" : "run " + job.id + "'s spec again";
  if (!confirm("Submit a new job to " + what + "?")) return;
  try {
    const r = await api("jobs/" + encodeURIComponent(job.id) + "/resubmit" + (resume ? "?resume=1" : ""),
                        {method: "POST", headers: {"X-Dtrain-Console": "1"}});
    location.href = "/job.html?id=" + encodeURIComponent(r.job.id);
  } catch (e) { showError(e); }
}

async function showLogs() {
  try {
    const logs = await api("jobs/" + encodeURIComponent(job.id) + "/logs");
    $("logs").replaceChildren(...(logs.entries || []).map(e => el("li",
        {class: "log " + e.severity, "data-rank": e.rank},
        new Date(num(e.time_unix_ms)).toLocaleTimeString() + " " +
        (e.rank < 0 ? "coordinator" : "rank " + e.rank + " (" + e.worker_id + ")") + ": " + e.text)));
    $("logs").dataset.entries = (logs.entries || []).length;
  } catch (e) { $("logs").replaceChildren(el("li", {}, (e.code ? e.code + ": " : "") + e.message)); }
}
