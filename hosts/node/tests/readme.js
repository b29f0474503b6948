// What README.md states about this host, parsed so that the tests hold it to what they measure.

import { readFileSync } from "node:fs";

export const README = readFileSync(new URL("../README.md", import.meta.url), "utf8");

/** The results table: family -> { outputs, cases, native, wasm, embeddings: { native, wasm } | null }. */
export function resultsTable() {
  const rows = {};
  const pattern =
    /^\| (\w+) +\| (\d+) \((\d+) cases\) +\| (\S+) +\| (\S+) +\| (?:(\S+) \/ (\S+)|-) +\|$/gm;
  for (const match of README.matchAll(pattern)) {
    const [, family, outputs, cases, native, wasm, embeddingNative, embeddingWasm] = match;
    rows[family] = {
      outputs: Number(outputs),
      cases: Number(cases),
      native: Number(native),
      wasm: Number(wasm),
      embeddings:
        embeddingNative === undefined
          ? null
          : { native: Number(embeddingNative), wasm: Number(embeddingWasm) },
    };
  }
  return rows;
}

/** The sample output of `node bin/verify.js` (the block after "It prints one line per output"). */
export function sampleOutput() {
  const after = README.slice(README.indexOf("It prints one line per output"));
  const [, block] = after.match(/```\n([\s\S]*?)```/);
  return block.trimEnd().split("\n");
}

/** A measured difference against the README's figure: equal within a factor of 2. */
export function near(measured, stated) {
  return stated > 0 && measured >= stated / 2 && measured <= stated * 2;
}
