// Drives `primekv serve` with the official openai npm client. Inputs (environment):
// PRIMEKV_BASE_URL, PRIMEKV_API_KEY, PRIMEKV_EXPECT (JSON: prompts and generate's answers).
import OpenAI from 'openai';

const expect = JSON.parse(process.env.PRIMEKV_EXPECT);
const client = new OpenAI({
  baseURL: process.env.PRIMEKV_BASE_URL,
  apiKey: process.env.PRIMEKV_API_KEY,
  timeout: 60_000,
  maxRetries: 0,
});
let failed = 0;
function check(cond, what) {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}`);
  if (!cond) failed++;
}

const models = await client.models.list();
const ids = [];
for await (const m of models) ids.push(m.id);
check(ids.includes('primekv-retrieval'), `models.list -> ${JSON.stringify(ids)}`);

const chat = await client.chat.completions.create({
  model: 'primekv-retrieval',
  messages: [{ role: 'user', content: expect.chat_prompt }],
  temperature: 0,
  max_tokens: expect.n,
});
check(chat.choices[0].message.content === expect.chat_text,
      `chat.completions.create equals generate --chat: ${JSON.stringify(chat.choices[0].message.content)}`);
check(chat.usage.completion_tokens > 0 && chat.usage.prompt_tokens > 100, 'chat usage');

const stream = await client.chat.completions.create({
  model: 'primekv-retrieval',
  messages: [{ role: 'user', content: expect.stream_prompt }],
  temperature: 0,
  max_tokens: expect.n,
  stream: true,
});
let streamed = '';
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  streamed += chunk.choices[0]?.delta?.content ?? '';
}
check(streamed === expect.stream_text && chunks > 2,
      `streaming chat (${chunks} chunks) equals generate --chat: ${JSON.stringify(streamed)}`);

const completion = await client.completions.create({
  model: 'primekv-retrieval',
  prompt: expect.completion_prompt,
  temperature: 0,
  max_tokens: expect.n,
  primekv: { press: 'primekv', ratio: 0.25 },
});
check(completion.choices[0].text === expect.completion_text,
      `completions.create equals generate: ${JSON.stringify(completion.choices[0].text)}`);

// A continued conversation reuses the cache: only the new tokens are prefilled.
const turn2 = await client.completions.create({
  model: 'primekv-retrieval',
  prompt: expect.completion_prompt + completion.choices[0].text + '\nAnd the other one?\n',
  temperature: 0,
  max_tokens: 4,
  primekv: { press: 'primekv', ratio: 0.25 },
});
check(turn2.usage.prompt_tokens_details.cached_tokens >= completion.usage.prompt_tokens,
      `second turn reuses ${turn2.usage.prompt_tokens_details.cached_tokens} cached tokens`);

try {
  await client.chat.completions.create({
    model: 'primekv-retrieval',
    messages: [{ role: 'user', content: 'hi' }],
    primekv: { press: 'nosuchpress' },
  });
  check(false, 'unknown press is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400, `unknown press -> ${e.status} ${e.message}`);
}
const noKey = new OpenAI({ baseURL: process.env.PRIMEKV_BASE_URL, apiKey: 'wrong', maxRetries: 0 });
try {
  await noKey.models.list();
  check(false, 'wrong key is refused');
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError, `wrong key -> ${e.status}`);
}
console.log(failed ? `${failed} check(s) failed` : 'all checks passed');
process.exit(failed ? 1 : 0);
