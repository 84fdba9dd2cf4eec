#!/usr/bin/env python3
"""Writes corpus.json: 2,000 deterministic test strings for the pre-tokenizer parity tests.

Run with /usr/bin/python3 from this directory: /usr/bin/python3 gen_corpus.py > corpus.json
The strings mix scripts (Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK, kana,
Hangul), digits and long digit runs, code, whitespace runs (tabs, newlines, CRLF, non-ASCII
spaces), emoji (ZWJ sequences, flags, skin tones), contractions in every case, and punctuation
runs (ASCII, CJK, Arabic, Devanagari, typographic quotes and dashes). All valid UTF-8, no NUL,
drawn only from characters assigned long before Unicode 14.
"""
import json
import random
import sys

R = random.Random(20250221)

WORDS = ("the quick brown fox jumps over lazy dog hello world tokenizer model inference cache "
         "page kernel attention layer value key query batch stream token prompt engine").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE",
                "'VE", "'M", "'LL", "'Ll", "'D", "'x", "'", "''", "’s", "'em"]
SCRIPTS = {
    "cyrillic": "Привет мир как дела это тест Ёлка ЖУК щука",
    "greek": "Καλημέρα κόσμε ΑΒΓΔ αλφάβητο ΰ",
    "arabic": "مرحبا بالعالم، كيف حالك؟ هذا اختبار۔ ١٢٣ ٤٥٦",
    "hebrew": "שלום עולם זה מבחן",
    "devanagari": "नमस्ते दुनिया। यह परीक्षण है॥ १२३ क्षत्रिय",
    "thai": "สวัสดีชาวโลก ภาษาไทย",
    "chinese": "你好世界，这是一个测试。我们的模型、缓存和内核！龥龦",
    "japanese": "こんにちは世界。カタカナとひらがな、テスト！ｶﾀｶﾅ",
    "korean": "안녕하세요 세계. 한국어 테스트입니다",
    "latin_ext": "Führer café naïve façade Ærøskøbing Łódź ǅemal ǈ İstanbul ß ẞ ĳ µ",
    "fullwidth": "ＡＢＣ ａｂｃ １２３ ！？（）",
}
EMOJI = ["😀", "🦙", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇮", "🇯🇵", "❤️", "☕", "🚀🚀", "✨", "🏳️‍🌈", "©", "™", "½", "²",
         "Ⅻ", "°C", "€", "¥", "∑", "√", "≠", "→", "★"]
PUNCT = ["...", "…", "!!!", "?!", "?", "!", ",", ".", ";", ":", "--", "—", "–", "“quoted”", "‘x’",
         "«guillemets»", "(paren)", "[bracket]", "{brace}", "<angle>", "|", "||", "~", "~~~", "`",
         "```", "^", "$", "+", "=", "==", "<=", ">=", "->", "=>", "@", "#", "%", "&", "*", "_",
         "__", "\\", "/", "//", "'", '"', "。", "，", "、", "！", "？", "（", "）", "《》", "·",
         "।", "॥", "۔", "،", "؟", "¿", "¡", "§", "¶", "†", "•", "‰", "′", "″"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n",
          "\n ", " \t ", "\u00a0", "\u3000", "\u2009", "\u2003", "\u202f", "\u0085", "\v", "\f",
          " \u00a0 "]
CODE = [
    "int main(int argc, char** argv) {\n\treturn 0;\n}\n",
    "def f(x):\n    return x**2 + 3*x - 1  # comment\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if x != None and y >= 10:\n        print(f\"{x=} {y!r}\")\n",
    "const auto& [k, v] = *it; // C++17\r\n",
    "<sentinel:123> <sentinel:7>x <sentinel:> IMGIMGABZ IMGIMGAAAAZ IMGIMGJZ",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;",
    "$ cat file.txt | grep -v '^#' | wc -l > out.log 2>&1",
    "x = {'a': [1, 2, 3], \"b\": (4.5e-3, -0x1F)}",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![]; Ok(()) }",
    "    \t  mixed   indentation\n\t\tend",
    "https://example.com/path?query=1&b=2#frag",
    "user@example.org, C:\\Program Files\\x86\\app.exe",
    "a+b-c*d/e%f^g|h&i~j`k",
]


def number():
    kind = R.randrange(8)
    if kind == 0:
        return str(R.randrange(10))
    if kind == 1:
        return str(R.randrange(10 ** R.randrange(2, 8)))
    if kind == 2:
        return "".join(R.choice("0123456789") for _ in range(R.randrange(8, 40)))
    if kind == 3:
        return f"{R.randrange(100000):,}.{R.randrange(100):02d}"
    if kind == 4:
        return f"{R.random() * 1000:.{R.randrange(1, 7)}f}"
    if kind == 5:
        return R.choice(["١٢٣٤", "१२३", "②③", "Ⅻ", "½", "²³", "１２３４", "๑๒๓"])
    if kind == 6:
        return "v" + ".".join(str(R.randrange(20)) for _ in range(3))
    return str(R.randrange(10 ** 12)) + R.choice(["px", "kg", "%", "th", "st", "e9", "ms"])


def word():
    w = R.choice(WORDS)
    case = R.randrange(6)
    if case == 1:
        w = w.upper()
    elif case == 2:
        w = w.capitalize()
    elif case == 3:
        w = "".join(c.upper() if R.random() < 0.5 else c for c in w)
    return w


def script_chunk():
    text = SCRIPTS[R.choice(sorted(SCRIPTS))]
    a = R.randrange(len(text))
    b = min(len(text), a + R.randrange(1, 20))
    return text[a:b]


def atom():
    kind = R.randrange(12)
    if kind <= 2:
        return word()
    if kind == 3:
        return word() + R.choice(CONTRACTIONS)
    if kind == 4:
        return number()
    if kind == 5:
        return script_chunk()
    if kind == 6:
        return R.choice(EMOJI)
    if kind == 7:
        return R.choice(PUNCT)
    if kind == 8:
        return R.choice(SPACES)
    if kind == 9:
        return R.choice(CODE)[: R.randrange(5, 60)]
    if kind == 10:
        return "".join(R.choice(PUNCT) for _ in range(R.randrange(1, 4)))
    return word() + R.choice(PUNCT)


def sep():
    return " " if R.random() < 0.7 else R.choice(SPACES + [""])


def sentence():
    n = R.randrange(1, 14)
    return "".join(atom() + (sep() if i + 1 < n else "") for i in range(n))


# Characters for the random strings: ASCII printable plus long-assigned blocks.
POOL = ([chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r") + list("".join(SCRIPTS.values())) +
        EMOJI + ["\u00a0", "\u3000", "\u2009", "\u0301", "\u0308", "\u093f", "\u0e31", "\ufe0f",
                 "\u200d", "\u200b", "\u00ad", "\u2028"])


def random_string():
    return "".join(R.choice(POOL) for _ in range(R.randrange(1, 80)))


def fixed():
    out = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n\n", "\r\n", " \r\n", "\t\n", "Hello world",
        " Hello world", "Hello World", "HELLO WORLD", "hello  world", "hello   world ",
        "I'm", "I'M", "you're", "YOU'RE", "You'Re", "we've", "WE'VE", "she'll", "SHE'LL",
        "he'd", "HE'D", "it's", "IT'S", "don't", "DON'T", "'s", "'S", "''", "'", "a'", "'ll'",
        "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
        "3.14159", "1,000,000", "0x1F", "2025-02-21", "v1.2.3", "١٢٣٤٥", "१२३४", "１２３",
        "Ⅻ", "½", "²", "...", "!!!", "?!?", "…", "。", "，", "、", "。。。", "!?.,", "(hi)",
        "[x]|{y}", "~", "~~", "`", "``", "a~b", "~abc", "$100", "+1", "<=>", "^^", "||",
        "<sentinel:1>", "<sentinel:12345>", "IMGIMGAZ", "IMGIMGABCDZ", "IMGIMGABCDEZ",
        "    x", "  x", " x", "\tx", "\t\tx", "x    ", "x  \n  y", "a\r\nb", "a\rb", "a\n\nb",
        "你好", "你好世界", "こんにちは", "カタカナ", "안녕", "Привет", "ПРИВЕТ", "مرحبا",
        "नमस्ते", "สวัสดี", "Καλημέρα", "שלום", "ǅ", "ǈǋ", "Ａｂｃ", "ＡＢＣ",
        "😀", "👨‍👩‍👧‍👦", "🇫🇮", "❤️", "e\u0301", "Café", "CAFÉ", "naïve",
        "\u00a0", "\u3000", "a\u3000b", "a\u00a0b", "\u0085", "a\u2009b", "\v\f",
        "HelloWorld", "helloWorld", "HELLOworld", "ÄBC", "äBC", "ÀÉÎ", "HTTPServer",
        "XMLHttpRequest", "iPhone", "McDonald's", "O'Neil", "ΑΒΓαβγ", "ÜberMan",
        "a/b", "a//b\n/", "x/\n", "./path/to", "1/2", "and/or",
        "Führer", "ǅemal", "µ", "ß", "ſ",
        "\n\n\n\n", "\t\t\t", "  \n  \n", " \t\n \r\n",
        "x" * 40, "ab" * 30, "9" * 50, " " * 20, "\n" * 10, "a" + " " * 9 + "b",
    ]
    return out


def main():
    corpus = fixed()
    while len(corpus) < 1500:
        corpus.append(sentence())
    while len(corpus) < 1900:
        corpus.append(random_string())
    while len(corpus) < 2000:
        corpus.append("\n".join(sentence() for _ in range(R.randrange(2, 6))))
    corpus = [s.replace("\0", "") for s in corpus]
    json.dump(corpus, sys.stdout, ensure_ascii=False, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
