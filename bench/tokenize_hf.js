// The peer of bench/tokenize_bench: Hugging Face tokenizers (the npm package's Rust binding)
// encoding the same JSON array of documents with encodeBatch (threads: RAYON_NUM_THREADS), the
// best of ROUNDS rounds after a warm-up, printed as the same JSON line with the same id hash.
//   node tokenize_hf.js NODE_MODULES TOKENIZER_JSON TEXTS_JSON [ROUNDS]
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modules, tokenizerJson, textsPath, roundsArg] = process.argv.slice(2);
  const {Tokenizer} = require(path.resolve(modules, 'tokenizers'));
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const documents = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
  const bytes = documents.reduce((sum, text) => sum + Buffer.byteLength(text, 'utf8'), 0);
  const encodeAll = async () => {
    const start = process.hrtime.bigint();
    const encodings = [];
    for (let i = 0; i < documents.length; i += 4096) {
      const batch = documents.slice(i, i + 4096);
      encodings.push(...await tokenizer.encodeBatch(batch, {addSpecialTokens: false}));
    }
    return [Number(process.hrtime.bigint() - start) / 1e9, encodings];
  };
  let [best, encodings] = await encodeAll();  // warm-up
  for (let round = 0; round < Number(roundsArg || 3); round++) {
    const [seconds, latest] = await encodeAll();
    if (seconds < best) best = seconds;
    encodings = latest;
  }
  let hash = 0, tokens = 0;
  for (const encoding of encodings) {
    for (const id of encoding.getIds()) hash = (Math.imul(hash, 31) + id + 1) >>> 0;
    tokens += encoding.getLength();
  }
  console.log(JSON.stringify({implementation: 'hf-tokenizers', threads:
    Number(process.env.RAYON_NUM_THREADS), mb: bytes / 1e6, seconds: best,
    mb_per_s: bytes / 1e6 / best, tokens, hash}));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
