#!/usr/bin/env node
// The console's curve decimation (console_assets/curve.js) under node: what a long job's chart
// draws. Run by //client:curve_test.
"use strict";

const assert = require("assert");
const {StepSeries, searchSorted, decimate, stepsToDraw, compactSeries, smooth, clampSmoothing} =
    require("./console_assets/curve.js");

const tests = {
  "a short curve is drawn whole": () => {
    const xs = [1, 2, 3, 5, 8];
    assert.deepStrictEqual(decimate(xs, x => x, 1, 8, 100), xs);
    assert.deepStrictEqual(decimate(xs, x => x, 2, 5, 100), [2, 3, 5]);
    assert.deepStrictEqual(decimate(xs, x => x, 4, 4, 100), []);
  },

  "a million steps: at most two a bucket, the ends, and a one-step spike and dip": () => {
    const xs = Array.from({length: 1000000}, (_, i) => i + 1);
    const loss = x => x === 123457 ? 100 : x === 765432 ? -5 : 3 + Math.sin(x / 1000);
    const drawn = decimate(xs, loss, 1, 1000000, 1000);
    assert.ok(drawn.length <= 2 * 1000 + 2, "drawn " + drawn.length);
    assert.ok(drawn.length >= 1000, "drawn " + drawn.length);
    assert.strictEqual(drawn[0], 1);
    assert.strictEqual(drawn[drawn.length - 1], 1000000);
    assert.ok(drawn.includes(123457), "the spike is drawn");
    assert.ok(drawn.includes(765432), "the dip is drawn");
    for (let i = 1; i < drawn.length; i++) assert.ok(drawn[i] > drawn[i - 1], "increasing at " + i);
  },

  "steps thinned by a worker's queue (every 16th) are decimated the same way": () => {
    const xs = Array.from({length: 50000}, (_, i) => 16 * (i + 1));
    const drawn = decimate(xs, x => (x % 4096 === 0 ? 9 : 1), xs[0], xs[xs.length - 1], 100);
    assert.ok(drawn.length <= 202);
    assert.ok(drawn.filter(x => x % 4096 === 0).length >= 99, "every bucket's peak is drawn");
  },

  "zoomed: the window at full resolution, the whole range coarsely around it": () => {
    const xs = Array.from({length: 100000}, (_, i) => i + 1);
    const drawn = stepsToDraw(xs, x => x % 7, [5000.5, 5100.2], 200);
    for (let x = 5001; x <= 5100; x++) assert.ok(drawn.includes(x), "step " + x + " in the window");
    assert.strictEqual(drawn[0], 1);
    assert.strictEqual(drawn[drawn.length - 1], 100000);
    assert.ok(drawn.length <= 4 * 200 + 4 + 100, "drawn " + drawn.length);
    assert.deepStrictEqual(stepsToDraw([], x => x, null, 10), []);
  },

  "NaN is drawn only where a bucket has nothing else": () => {
    const xs = Array.from({length: 1000}, (_, i) => i + 1);
    const drawn = decimate(xs, x => (x === 1 || x > 990 ? NaN : x), 1, 1000, 10);
    assert.ok(drawn.includes(1) && drawn.includes(1000), "the ends");
    // Bucket 0 (steps 1-100) starts with a NaN: its real extremes 2 and 100 are drawn; the last
    // bucket's NaN steps 991-999 are not.
    assert.ok(drawn.includes(2) && drawn.includes(100), "bucket 0: " + drawn.slice(0, 4));
    assert.ok(drawn.includes(990) && !drawn.includes(995), "the last bucket: " + drawn.slice(-4));
  },

  "a series keeps its steps sorted as they stream in, replacing a step reported again": () => {
    const s = new StepSeries();
    for (const x of [1, 2, 3]) s.set(x, [x]);
    s.set(2, [20]);  // a recovery's run redid step 2
    s.set(0.5, [0]);
    assert.strictEqual(s.size, 4);
    assert.deepStrictEqual(s.steps(), [0.5, 1, 2, 3]);
    assert.deepStrictEqual(s.get(2), [20]);
    assert.ok(s.has(3) && !s.has(4));
    assert.strictEqual(searchSorted([1, 2, 2, 3], 2, true), 1);
    assert.strictEqual(searchSorted([1, 2, 2, 3], 2, false), 3);
  },

  "a series keeps only the steps asked for, in order": () => {
    const s = new StepSeries();
    for (const x of [3, 1, 2, 5, 4]) s.set(x, [x * 10]);
    s.retain(x => x % 2 === 1);
    assert.deepStrictEqual(s.steps(), [1, 3, 5]);
    assert.strictEqual(s.size, 3);
    assert.ok(!s.has(2) && s.get(5)[0] === 50);
    s.set(4, [40]);
    assert.deepStrictEqual(s.steps(), [1, 3, 4, 5]);
  },

  "a page open for long keeps what its charts draw, the pinned steps and the newest": () => {
    const s = new StepSeries();
    const loss = x => (x === 12345 ? 50 : 2 + Math.sin(x / 100));
    const tps = x => (x === 23456 ? 1 : 1000);
    let through = 0;
    for (let x = 1; x <= 100000; x++) {
      s.set(x, [loss(x), tps(x)]);
      const t = compactSeries(s, [x => s.get(x)[0], x => s.get(x)[1]], 1000, 16000,
                              () => x => (x >= 50000 && x <= 50300) || x % 10000 === 0);
      if (t) through = t;
    }
    assert.ok(s.size <= 16000 * 2, "held " + s.size);
    assert.ok(through > 90000 - 16000 * 2, "thinned through " + through);
    for (const x of [1, 12345, 23456, 30000, 50000, 50150, 50300, 100000]) {
      assert.ok(s.has(x), "step " + x + " kept");
    }
    assert.deepStrictEqual(compactSeries(s, [x => s.get(x)[0]], 1000, 16000, () => x => false),
                           0);
  },

  "smoothing: TensorBoard's debiased moving average, by its closed form": () => {
    const close = (a, b) => assert.ok(Math.abs(a - b) < 1e-12, a + " != " + b);
    // v = 2, 4, 8 with weight 0.5: m = 1, 2.5, 5.25 over 1 - 0.5^n = 0.5, 0.75, 0.875.
    const v = new Map([[1, 2], [2, 4], [3, 8]]);
    const s = smooth([1, 2, 3], x => v.get(x), 0.5);
    close(s.get(1), 2);
    close(s.get(2), 10 / 3);
    close(s.get(3), 6);
    // A constant curve stays itself at any weight; weight 0 is the curve itself.
    const flat = smooth([10, 20, 30, 40], () => 3.25, 0.99);
    for (const x of [10, 20, 30, 40]) close(flat.get(x), 3.25);
    const raw = smooth([1, 2, 3], x => v.get(x), 0);
    for (const x of [1, 2, 3]) close(raw.get(x), v.get(x));
    // A NaN is its own value and leaves the average alone: 2, NaN, 4 as 2, 4.
    const gap = new Map([[1, 2], [2, NaN], [3, 4]]);
    const g = smooth([1, 2, 3], x => gap.get(x), 0.5);
    close(g.get(1), 2);
    assert.ok(Number.isNaN(g.get(2)));
    close(g.get(3), 10 / 3);
  },

  "smoothing: a noisy loss's trend is closer to the truth than the loss": () => {
    // Loss 5 * exp(-x / 3000) plus uniform noise of +-0.5 (RMS 0.29). At 0.9 an average of
    // independent noise keeps sqrt((1 - 0.9) / (1 + 0.9)) = 0.23 of its RMS, plus a lag of
    // about 9 steps on the slope: the trend's RMS error is under a third of the loss's.
    let seed = 7;
    const noise = () => ((seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5);
    const xs = Array.from({length: 10000}, (_, i) => i + 1);
    const truth = x => 5 * Math.exp(-x / 3000);
    const loss = new Map(xs.map(x => [x, truth(x) + noise()]));
    const s = smooth(xs, x => loss.get(x), 0.9);
    const rms = (f) => Math.sqrt(xs.reduce((sum, x) => sum + (f(x) - truth(x)) ** 2, 0) / xs.length);
    const raw = rms(x => loss.get(x)), trend = rms(x => s.get(x));
    assert.ok(raw > 0.27 && raw < 0.31, "raw RMS " + raw);
    assert.ok(trend < raw / 3, "trend RMS " + trend + ", raw " + raw);
  },

  "smoothing weights are clamped to [0, 0.99]; nothing or garbage is the default 0.6": () => {
    assert.strictEqual(clampSmoothing("0.3"), 0.3);
    assert.strictEqual(clampSmoothing(1), 0.99);
    assert.strictEqual(clampSmoothing(-2), 0);
    assert.strictEqual(clampSmoothing("x"), 0.6);
    assert.strictEqual(clampSmoothing(null), 0.6);  // nothing kept yet
    assert.strictEqual(clampSmoothing("0"), 0);
  },
};

let failed = 0;
for (const [name, test] of Object.entries(tests)) {
  try {
    test();
    console.log("ok   " + name);
  } catch (e) {
    failed++;
    console.log("FAIL " + name + ": " + e.message);
  }
}
process.exit(failed === 0 ? 0 : 1);
