// The official `openai` npm client against a running `strata serve` (tests/cli/test_serve_cli.cpp):
// completions and chat completions, each streaming and not, with the server's API key; a wrong
// key must raise the client's AuthenticationError. Prints one JSON object of what it got (the
// C++ test compares it with the server's own answers); exits 1 with a message on any failure.
//   node openai_client.js NODE_MODULES BASE_URL API_KEY MODEL
'use strict';
const path = require('path');

const [modules, baseURL, apiKey, model] = process.argv.slice(2);
const {OpenAI} = require(path.join(path.resolve(modules), 'openai'));

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function main() {
  const client = new OpenAI({baseURL: baseURL + '/v1', apiKey, maxRetries: 0});
  const out = {};

  const prompt = {model, prompt: 'hello ', max_tokens: 8, temperature: 0};
  const completion = await client.completions.create(prompt);
  check(completion.object === 'text_completion', 'completion object: ' + completion.object);
  out.completion = completion.choices[0].text;
  out.completion_usage = completion.usage;
  let streamed = '';
  for await (const chunk of await client.completions.create({...prompt, stream: true})) {
    streamed += chunk.choices.length ? chunk.choices[0].text : '';
  }
  out.completion_streamed = streamed;

  const messages = [
    {role: 'system', content: 'You are terse.'},
    {role: 'user', content: 'hello'},
  ];
  const chatRequest = {model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2};
  const chat = await client.chat.completions.create(chatRequest);
  check(chat.object === 'chat.completion', 'chat object: ' + chat.object);
  check(chat.choices[0].message.role === 'assistant', 'role: ' + chat.choices[0].message.role);
  out.chat = chat.choices[0].message.content;
  out.chat_finish_reason = chat.choices[0].finish_reason;
  out.chat_usage = chat.usage;
  out.chat_logprobs = chat.choices[0].logprobs.content.map((entry) => ({
    token: entry.token,
    logprob: entry.logprob,
    top: entry.top_logprobs.length,
  }));
  let chatStreamed = '', role = null, usage = null, chunks = 0;
  const stream = await client.chat.completions.create({
    ...chatRequest,
    stream: true,
    stream_options: {include_usage: true},
  });
  for await (const chunk of stream) {
    check(chunk.object === 'chat.completion.chunk', 'chunk object: ' + chunk.object);
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    const delta = chunk.choices[0].delta;
    if (delta.role) role = delta.role;
    chatStreamed += delta.content || '';
  }
  check(role === 'assistant', 'the stream never said the role');
  check(usage !== null, 'no usage chunk with stream_options.include_usage');
  out.chat_streamed = chatStreamed;
  out.chat_streamed_usage = usage;
  out.chat_chunks = chunks;

  // The accumulating stream helper the client ships for chat.
  const runner = client.chat.completions.stream({model, messages, max_tokens: 8, temperature: 0});
  out.chat_final = (await runner.finalChatCompletion()).choices[0].message.content;

  const wrong = new OpenAI({baseURL: baseURL + '/v1', apiKey: apiKey + 'x', maxRetries: 0});
  try {
    await wrong.models.list();
    throw new Error('a wrong key was accepted');
  } catch (error) {
    check(error instanceof OpenAI.AuthenticationError, 'wrong key: ' + error);
    out.wrong_key_status = error.status;
  }
  const models = await client.models.list();
  out.models = models.data.map((entry) => entry.id);
  console.log(JSON.stringify(out));
}

main().catch((error) => {
  console.error('openai_client: ' + (error.stack || error));
  process.exit(1);
});
