/**
 * The export's tokenizer, built from the checked bytes of its tokenizer.json with the pure-JS
 * @huggingface/tokenizers. A byte-level BPE with no post-processor: `encode` gives exactly the text's
 * tokens and the models add <s>, </s>, <cls>, <sep> themselves.
 */

import { Tokenizer } from "@huggingface/tokenizers";

import { InputError, ManifestError } from "./errors.js";

export class TextTokenizer {
  /** @param {Uint8Array} bytes tokenizer.json, checked @param {object} specialTokens name -> id */
  constructor(bytes, specialTokens, { name = "tokenizer.json" } = {}) {
    let json;
    try {
      json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
      this.tokenizer = new Tokenizer(json, {});
    } catch (error) {
      throw new ManifestError(`${name} is not a tokenizer.json (${error.message}); re-export the folder`);
    }
    this.specialTokens = { ...specialTokens };
    this.vocabSize = this.tokenizer.get_vocab(true).size;
    // A ByteFallback decoder (Llama 2, Gemma) turns a run of byte tokens ("<0xE2>") into text only as a
    // whole, and a run that is not valid UTF-8 into one U+FFFD per byte, valid ones included: text from
    // such a run may still change while the run goes on (`settled`).
    this.byteTokens = new Set();
    if (JSON.stringify(json.decoder ?? null).includes('"ByteFallback"')) {
      const vocab = json.model?.vocab ?? {};
      const pieces = Array.isArray(vocab) ? vocab.map(([piece], id) => [piece, id]) : Object.entries(vocab);
      for (const [piece, id] of pieces) {
        if (/^<0x[0-9A-Fa-f]{2}>$/.test(piece)) this.byteTokens.add(id);
      }
    }
  }

  /**
   * How many leading `ids` have a text that later ids cannot change: all of them, but for a ByteFallback
   * decoder not a trailing run of byte tokens (decoded only as a whole run).
   */
  settled(ids) {
    let end = ids.length;
    while (end > 0 && this.byteTokens.has(ids[end - 1])) end -= 1;
    return end;
  }

  /** The text's token ids, no special tokens added; "" gives []. */
  encode(text) {
    if (typeof text !== "string") {
      throw new InputError(`text must be a string, got ${typeof text}`);
    }
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** The text of `ids` with special tokens left out ("" for no ids, as the Python runtime). */
  decode(ids) {
    const bad = ids.filter((id) => !Number.isInteger(id) || id < 0 || id >= this.vocabSize);
    if (bad.length > 0) {
      throw new InputError(
        `token ids ${bad.slice(0, 5)} are outside the vocabulary 0 .. ${this.vocabSize - 1}`,
      );
    }
    if (ids.length === 0) return ""; // the library refuses an empty list
    return this.tokenizer.decode(ids, { skip_special_tokens: true });
  }
}
