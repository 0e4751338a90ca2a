// dtrain console: which steps of a long curve to draw. A chart is a few hundred pixels wide, and
// a job of a million steps redrawn point by point cost the browser minutes while its history
// streamed in and hundreds of MB; so a curve is drawn from at most two steps per bucket of the
// range on show: each bucket's lowest and highest value, in step order, so that the envelope and
// a one-step spike stay visible (min/max decimation). Zoomed in, the window is drawn again from
// every step held, and the whole range stays drawn coarsely around it (so the zoom can be undone).
"use strict";

// A curve's steps as they stream in: step -> values, and the steps in increasing order (kept
// sorted as they come; one that arrives out of order sorts them once, when they are next read).
class StepSeries {
  constructor() {
    this.values = new Map();
    this.xs = [];
    this.sorted = true;
  }
  set(step, value) {
    if (!this.values.has(step)) {
      if (this.xs.length > 0 && step < this.xs[this.xs.length - 1]) this.sorted = false;
      this.xs.push(step);
    }
    this.values.set(step, value);
  }
  has(step) { return this.values.has(step); }
  get(step) { return this.values.get(step); }
  get size() { return this.xs.length; }
  // Keeps only the steps for which keep(step) is true.
  retain(keep) {
    const values = new Map();
    this.xs = this.steps().filter(keep);
    for (const x of this.xs) values.set(x, this.values.get(x));
    this.values = values;
  }
  steps() {
    if (!this.sorted) {
      this.xs.sort((a, b) => a - b);
      this.sorted = true;
    }
    return this.xs;
  }
}

// The index of the first element of the increasing array `xs` above `x` (or at or above it when
// `inclusive`).
function searchSorted(xs, x, inclusive) {
  let lo = 0, hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] < x || (!inclusive && xs[mid] === x)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The steps of `xs` (increasing) within [lo, hi] to draw, increasing: all of them when there are
// at most 2 * buckets, else the first, the last, and per bucket of equal width the steps of the
// lowest and the highest value(x) (a NaN value only when its bucket has no other).
function decimate(xs, value, lo, hi, buckets) {
  const from = searchSorted(xs, lo, true);
  const to = searchSorted(xs, hi, false);
  if (to - from <= 2 * buckets) return xs.slice(from, to);
  const first = xs[from];
  const width = (xs[to - 1] - first + 1) / buckets;
  const out = [first];
  const add = (x) => { if (x !== out[out.length - 1]) out.push(x); };
  let bucket = -1, low = 0, lowV = 0, high = 0, highV = 0;
  const flush = () => {
    if (bucket < 0) return;
    add(Math.min(low, high));
    add(Math.max(low, high));
  };
  for (let i = from; i < to; i++) {
    const x = xs[i], v = value(x), k = Math.floor((x - first) / width);
    if (k !== bucket) {
      flush();
      bucket = k;
      low = high = x;
      lowV = highV = v;
    } else if (v < lowV || Number.isNaN(lowV)) {
      low = x;
      lowV = v;
    } else if (v > highV || Number.isNaN(highV)) {
      high = x;
      highV = v;
    }
  }
  flush();
  add(xs[to - 1]);
  return out;
}

// What to draw of a whole curve with `view` ([lo, hi], or null: all) on show: the view at full
// resolution (decimate), and, when zoomed, the whole range coarsely; increasing, no repeats.
function stepsToDraw(xs, value, view, buckets) {
  if (xs.length === 0) return [];
  const whole = decimate(xs, value, xs[0], xs[xs.length - 1], buckets);
  if (!view) return whole;
  const merged = new Set(whole);
  for (const x of decimate(xs, value, view[0], view[1], buckets)) merged.add(x);
  return [...merged].sort((a, b) => a - b);
}

// A page left open on a running job holds every step its stream brings: a month at a step a
// second is millions. Once `series` holds more than its bound (`max` at first), it keeps only what
// its charts draw of the whole range (decimate of each of `values` over `buckets`), the steps
// for which the test `pinned()` gives is true (evaluated, marked, inside a zoomed window: asked
// for only when the series is thinned, not at every step) and the newest; the bound then
// becomes twice what is left (at least `max`), so a large pinned part does not make every new
// step compact again. Returns the newest step, through which the series is now thinned (a zoom
// there fetches its window again: console.js History), or 0 when under the bound.
function compactSeries(series, values, buckets, max, pinned) {
  if (series.size <= (series.compactAt || max)) return 0;
  const xs = series.steps();
  const newest = xs[xs.length - 1];
  const keep = new Set([newest]);
  for (const value of values) {
    for (const x of decimate(xs, value, xs[0], newest, buckets)) keep.add(x);
  }
  const isPinned = pinned();
  for (const x of xs) if (isPinned(x)) keep.add(x);
  series.retain(x => keep.has(x));
  series.compactAt = Math.max(max, 2 * series.size);
  return newest;
}

// A noisy curve's trend, as TensorBoard smooths a scalar: an exponential moving average over the
// points in step order with `weight` in [0, 1) (0: the values themselves), debiased so that
// the first points are not pulled toward zero:
//   m_i = weight * m_(i-1) + (1 - weight) * v_i,  m_0 = 0;  s_i = m_i / (1 - weight^n_i)
// with n_i the finite values so far. A value that is not finite is its own smoothed value and
// leaves the average alone. Per point, as TensorBoard's: where a page holds a thinned part of a
// long history (fewer points a step), a point there stands for more steps. Returns step ->
// smoothed value for each of `xs` (increasing).
function smooth(xs, value, weight) {
  const out = new Map();
  let m = 0, n = 0;
  for (const x of xs) {
    const v = value(x);
    if (!Number.isFinite(v)) {
      out.set(x, v);
      continue;
    }
    m = weight * m + (1 - weight) * v;
    n++;
    out.set(x, m / (1 - Math.pow(weight, n)));
  }
  return out;
}

// A smoothing weight as a page reads it (a slider's value, or what the browser kept: null when
// nothing): clamped to [0, 0.99]; TensorBoard's default, 0.6, for nothing or garbage.
const DEFAULT_SMOOTHING = 0.6;
function clampSmoothing(w) {
  const x = w === null || w === "" ? NaN : Number(w);
  return Number.isFinite(x) ? Math.min(0.99, Math.max(0, x)) : DEFAULT_SMOOTHING;
}

if (typeof module !== "undefined") {
  module.exports = {StepSeries, searchSorted, decimate, stepsToDraw, compactSeries, smooth,
                    clampSmoothing};
}
