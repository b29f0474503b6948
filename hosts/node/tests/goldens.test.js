// Every golden of the committed reference exports, on both engines: graph outputs within the listed
// tolerance, tokenizer ids equal, greedy generations token for token, embeddings within tolerance.
// The largest difference seen per graph output is reported as a test diagnostic.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ENGINES, verifyExport } from "../src/index.js";
import { exportDir } from "./helpers.js";

/** Per graph output (and for embeddings), the largest difference over all cases and its allowance. */
function summarize(results) {
  const worst = new Map();
  for (const result of results) {
    if (result.maxAbsDiff === undefined) continue;
    const key = result.check === "graph" ? `${result.file} ${result.output}` : `embedding ${result.output}`;
    const seen = worst.get(key);
    if (seen === undefined || !(result.maxAbsDiff <= seen.maxAbsDiff)) worst.set(key, result);
  }
  return [...worst].map(
    ([key, result]) =>
      `${key}: max diff ${result.maxAbsDiff.toExponential(2)} (allowed ${result.allowed.toExponential(2)})`,
  );
}

function failures(results) {
  return results
    .filter((result) => !result.ok)
    .map((result) => JSON.stringify({ ...result, got: undefined }))
    .join("\n");
}

for (const engine of Object.keys(ENGINES)) {
  for (const [family, checks] of [
    ["gpt", ["graph", "tokenizer", "greedy"]],
    ["t5", ["graph", "tokenizer", "greedy"]],
    ["bert", ["graph", "tokenizer", "embedding"]],
  ]) {
    test(`${family} goldens on ${engine}`, async (t) => {
      const report = await verifyExport(exportDir(family), { engine, threads: 1 });
      for (const line of summarize(report.results)) t.diagnostic(line);
      const kinds = new Set(report.results.map((result) => result.check));
      assert.deepEqual([...kinds].sort(), [...checks].sort(), "every kind of golden ran");
      assert.ok(report.ok, `goldens failed on ${engine}:\n${failures(report.results)}`);
    });
  }
}
