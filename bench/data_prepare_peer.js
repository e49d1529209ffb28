// The peer of bench/data_prepare.sh: Hugging Face tokenizers (Rust, through its Node binding)
// over a JSON-lines file as `strata data prepare` reads it: each record's "text" encoded
// without special tokens, then the end-of-text id; all ids written as little-endian uint32.
// encodeBatch spreads a batch over RAYON_NUM_THREADS threads.
//   node data_prepare_peer.js NODE_MODULES TOKENIZER_JSON CORPUS_JSONL OUT
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const [modules, tokenizerJson, corpus, out] = process.argv.slice(2);
const {Tokenizer} = require(path.join(path.resolve(modules), 'tokenizers'));

// The end-of-text token as strata finds it: the added token <|endoftext|> (GPT-2) or </s>.
function endOfTextId(file) {
  const json = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const name of ['<|endoftext|>', '</s>', '<|end_of_text|>']) {
    const token = (json.added_tokens || []).find((t) => t.content === name);
    if (token) return token.id;
  }
  throw new Error(`${file} has no end-of-text token`);
}

async function main() {
  const tokenizer = Tokenizer.fromFile(tokenizerJson);
  const endOfText = endOfTextId(tokenizerJson);
  const output = fs.openSync(out, 'w');
  const lines = readline.createInterface({input: fs.createReadStream(corpus), crlfDelay: Infinity});
  let batch = [];
  const flush = async () => {
    const encodings = await tokenizer.encodeBatch(batch, {addSpecialTokens: false});
    let total = 0;
    for (const encoding of encodings) total += encoding.getIds().length + 1;
    const ids = new Uint32Array(total);
    let at = 0;
    for (const encoding of encodings) {
      ids.set(encoding.getIds(), at);
      at += encoding.getIds().length;
      ids[at++] = endOfText;
    }
    fs.writeSync(output, Buffer.from(ids.buffer));
    batch = [];
  };
  for await (const line of lines) {
    if (!line.trim()) continue;
    batch.push(JSON.parse(line).text);
    if (batch.length === 2048) await flush();
  }
  if (batch.length > 0) await flush();
  fs.closeSync(output);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
