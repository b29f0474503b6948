// Opens an export folder with transformers.js (@huggingface/transformers, from hosts/node's packages) as a
// user would, from the local folder alone, and prints what it computes as JSON for tests/test_loaders.py.
//
//   node transformers_js.mjs HOSTS_NODE_DIR REQUESTS_JSON
//
// REQUESTS_JSON: a list of {"folder", "task": "generate" | "encode" | "seq2seq", "input_ids": [[...]],
// "attention_mask": [[...]], "decoder_input_ids": [[...]] (seq2seq), "head": null | "masked-lm" |
// "classification" (encode), "max_new_tokens", "text"}; prints the list of results.
import { createRequire } from 'node:module';
import path from 'node:path';

const [host, requestsText] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(host), 'package.json'));
const tjs = require('@huggingface/transformers');

tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;

function tensor(rows) {
  const flat = rows.flat().map((v) => BigInt(v));
  return new tjs.Tensor('int64', BigInt64Array.from(flat), [rows.length, rows[0].length]);
}

function plain(t) {
  return { dims: t.dims, data: Array.from(t.data, (v) => (typeof v === 'bigint' ? Number(v) : v)) };
}

const CLASSES = {
  generate: tjs.AutoModelForCausalLM,
  encode: tjs.AutoModel,
  seq2seq: tjs.AutoModelForSeq2SeqLM,
  'masked-lm': tjs.AutoModelForMaskedLM,
  classification: tjs.AutoModelForSequenceClassification,
};

async function run(request) {
  tjs.env.localModelPath = path.dirname(path.resolve(request.folder)) + path.sep;
  const name = path.basename(request.folder);
  const inputs = { input_ids: tensor(request.input_ids), attention_mask: tensor(request.attention_mask) };
  const model = await CLASSES[request.head ?? request.task].from_pretrained(name);
  const result = {};
  if (request.task === 'encode') {
    const out = await model(inputs);
    result[request.head ? 'logits' : 'last_hidden_state'] = plain(request.head ? out.logits : out.last_hidden_state);
  } else {
    const step = request.task === 'seq2seq' ? { decoder_input_ids: tensor(request.decoder_input_ids) } : {};
    result.logits = plain((await model({ ...inputs, ...step })).logits);
    const sequences = await model.generate({
      ...inputs,
      max_new_tokens: request.max_new_tokens,
      do_sample: false,
    });
    result.sequences = plain(sequences);
  }
  if (request.text !== undefined) {
    const tokenizer = await tjs.AutoTokenizer.from_pretrained(name);
    result.text_ids = tokenizer.encode(request.text);
  }
  await model.dispose();
  return result;
}

const results = [];
for (const request of JSON.parse(requestsText)) results.push(await run(request));
process.stdout.write(JSON.stringify(results));
