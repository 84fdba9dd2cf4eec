// Word lists written for this project, the seeded prose grammar of the "essay" haystack, the
// noise filler paragraph, and the random keys and values of the needles.
#include <array>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval_internal.h"

namespace primekv::eval_internal {
namespace {

constexpr std::string_view kAdjectives[] = {
    "quiet",   "bright",   "ancient", "gentle",   "hollow",  "silver",  "golden",  "crimson",
    "narrow",  "distant",  "humble",  "eager",    "fragile", "clever",  "brave",   "calm",
    "curious", "dusty",    "elegant", "faint",    "fierce",  "frozen",  "glossy",  "graceful",
    "hidden",  "honest",   "icy",     "jolly",    "kind",    "lively",  "lonely",  "lucky",
    "mellow",  "misty",    "modest",  "noble",    "odd",     "pale",    "patient", "plain",
    "polite",  "proud",    "rapid",   "rare",     "rough",   "rusty",   "sacred",  "shallow",
    "sharp",   "shiny",    "silent",  "sleepy",   "slender", "smooth",  "soft",    "solid",
    "sturdy",  "subtle",   "sunny",   "swift",    "tall",    "tame",    "tender",  "tidy",
    "tiny",    "velvet",   "vivid",   "warm",     "weary",   "wild",    "windy",   "wise",
    "wooden",  "young",    "zealous", "amber",    "azure",   "bitter",  "bold",    "breezy",
    "brisk",   "cheerful", "cozy",    "crisp",    "dainty",  "dim",     "dreamy",  "early",
    "fancy",   "fuzzy",    "gloomy",  "grand",    "hasty",   "jagged",  "keen",    "lavish",
    "mighty",  "nimble",   "olive",   "peaceful", "quaint",  "radiant", "scarlet", "spotted",
    "stormy",  "thorny",   "upbeat",  "vast",
};

constexpr std::string_view kNouns[] = {
    "river",    "lantern",  "meadow",  "harbor",     "window",   "garden",  "mountain", "bridge",
    "forest",   "candle",   "valley",  "island",     "castle",   "village", "orchard",  "compass",
    "feather",  "blanket",  "kettle",  "ladder",     "mirror",   "pebble",  "ribbon",   "saddle",
    "teapot",   "umbrella", "violin",  "wagon",      "anchor",   "basket",  "cabin",    "desert",
    "engine",   "falcon",   "glacier", "hammer",     "jacket",   "kitten",  "lemon",    "magnet",
    "notebook", "oyster",   "pillow",  "quilt",      "rocket",   "sparrow", "tunnel",   "walrus",
    "yacht",    "zebra",    "acorn",   "badger",     "beacon",   "bicycle", "canyon",   "cellar",
    "chimney",  "cloud",    "comet",   "cottage",    "crystal",  "dolphin", "dragon",   "drum",
    "eagle",    "fountain", "garnet",  "giraffe",    "helmet",   "horizon", "iceberg",  "jungle",
    "kingdom",  "lagoon",   "library", "lighthouse", "marble",   "market",  "monkey",   "museum",
    "nest",     "ocean",    "otter",   "palace",     "parrot",   "pepper",  "piano",    "planet",
    "puzzle",   "rabbit",   "raven",   "shadow",     "shell",    "ship",    "squirrel", "statue",
    "storm",    "sunset",   "tiger",   "tower",      "treasure", "trumpet", "turtle",   "volcano",
    "whale",    "whistle",  "willow",  "wizard",     "canvas",   "carpet",  "cherry",   "circus",
    "clock",    "coconut",  "copper",  "cricket",    "daisy",    "diamond", "feast",    "ferry",
    "fiddle",   "flute",    "forge",   "galaxy",     "goose",    "granite", "guitar",   "hammock",
    "hedgehog", "honey",    "jewel",   "kite",       "lobster",  "maple",   "meteor",   "mitten",
    "moss",     "orchid",   "owl",     "paddle",     "peach",    "pearl",   "penguin",  "pine",
    "plum",     "pond",     "pumpkin", "quarry",     "radish",   "reef",    "robin",    "saffron",
    "salmon",   "scarf",    "spoon",   "stable",     "stream",   "thimble", "thistle",  "tulip",
    "vessel",   "walnut",   "wheel",
};

struct Verb {
  std::string_view base, past;
};
constexpr Verb kTransitiveVerbs[] = {
    {"watch", "watched"},       {"find", "found"},        {"carry", "carried"},
    {"paint", "painted"},       {"follow", "followed"},   {"open", "opened"},
    {"build", "built"},         {"lift", "lifted"},       {"notice", "noticed"},
    {"repair", "repaired"},     {"visit", "visited"},     {"describe", "described"},
    {"remember", "remembered"}, {"admire", "admired"},    {"move", "moved"},
    {"clean", "cleaned"},       {"borrow", "borrowed"},   {"measure", "measured"},
    {"polish", "polished"},     {"guard", "guarded"},     {"study", "studied"},
    {"sketch", "sketched"},     {"collect", "collected"}, {"deliver", "delivered"},
    {"explore", "explored"},    {"inspect", "inspected"}, {"mend", "mended"},
    {"praise", "praised"},      {"protect", "protected"}, {"share", "shared"},
    {"trade", "traded"},        {"wrap", "wrapped"},      {"chase", "chased"},
    {"greet", "greeted"},       {"hide", "hid"},          {"keep", "kept"},
    {"lose", "lost"},           {"pack", "packed"},       {"push", "pushed"},
    {"pull", "pulled"},
};

constexpr std::string_view kIntransitivePast[] = {
    "waited",    "slept",    "laughed",  "arrived",  "vanished", "rested",  "wandered",
    "shone",     "trembled", "paused",   "drifted",  "glowed",   "sang",    "danced",
    "whispered", "hurried",  "lingered", "sighed",   "floated",  "settled", "smiled",
    "waved",     "rolled",   "swayed",   "shivered",
};

constexpr std::string_view kAdverbs[] = {
    "slowly",  "quietly", "gladly",   "carefully", "suddenly", "softly",  "gently",
    "proudly", "calmly",  "eagerly",  "patiently", "rarely",   "often",   "briskly",
    "boldly",  "warmly",  "barely",   "kindly",    "politely", "happily", "sadly",
    "lazily",  "neatly",  "silently", "swiftly",
};

constexpr std::string_view kNames[] = {
    "Alice", "Bruno", "Clara",  "Dmitri", "Elena", "Farid", "Greta",   "Hugo", "Ingrid", "Jonas",
    "Keiko", "Liam",  "Maya",   "Nadia",  "Oscar", "Priya", "Quentin", "Rosa", "Samir",  "Tessa",
    "Umar",  "Vera",  "Walter", "Xenia",  "Yusuf", "Zara",  "Omar",    "Lena", "Theo",   "Iris",
};

constexpr std::string_view kPlaces[] = {
    "the old town",         "the northern hills", "the river valley",  "the harbor district",
    "the quiet village",    "the eastern coast",  "the market square", "the high plateau",
    "the southern islands", "the mountain pass",  "the city center",   "the western plains",
    "the lakeside",         "the forest edge",    "the royal gardens", "the stone quarter",
    "the riverbank",        "the small island",   "the upper valley",  "the border town",
};

constexpr std::string_view kTimes[] = {
    "in the morning",    "at dawn",
    "late at night",     "every evening",
    "after the rain",    "before sunrise",
    "during the winter", "in early spring",
    "at noon",           "on a quiet afternoon",
    "in the autumn",     "after supper",
    "on market day",     "during the festival",
    "at dusk",           "at the end of summer",
};

constexpr std::string_view kPrepositions[] = {"near",   "behind", "beside", "under",  "beyond",
                                              "across", "above",  "around", "inside", "past"};

// Sentence templates of the prose grammar. Slots: {A} adjective, {N} noun, {T} transitive past,
// {t} transitive base, {I} intransitive past, {D} adverb, {P} name, {L} place, {W} time phrase,
// {R} preposition, {a} "a"/"an" chosen for the next word.
constexpr std::string_view kTemplates[] = {
    "The {A} {N} {I} {R} the {N}.",
    "{P} {T} the {A} {N} {W}.",
    "Nobody in {L} could explain why the {N} was so {A}.",
    "It was {A} to {t} the {N} before the {N} {I}.",
    "When the {N} {I}, {P} {D} {T} the {N}.",
    "According to {P}, every {N} in {L} is {A}.",
    "{W}, the {N} and the {N} {I} together.",
    "There is nothing more {A} than {a} {N} that {I} {D}.",
    "{P} once told {P} that the {N} {I} {R} the {A} {N}.",
    "Some say the {N} of {L} {I} because it was {A}.",
    "The story of the {A} {N} is {A}, and {P} {T} it {D}.",
    "If {a} {N} is {A}, the {N} should {t} it {D}.",
    "In {L}, {P} {T} {a} {N} while the {N} {I}.",
    "{P} wondered whether the {N} would {t} the {A} {N}.",
    "Every {N} needs {a} {A} {N}, said {P}.",
    "The {N} {I} for a long time, and then it {I} {D}.",
    "{D}, {P} {T} the {N} and {T} the {N}.",
    "Years ago {L} had {a} {A} {N} that everyone {T}.",
    "The {A} {N} was kept {R} the {N} {W}.",
    "{P} and {P} {T} the {N} {R} the {A} {N}.",
    "Many people believe that {a} {A} {N} brings luck to {L}.",
    "The {N} looked {A} {W}, so {P} {I}.",
    "No one {T} the {N}, yet it {I} {D} {R} the {N}.",
    "A letter from {P} {T} the {A} {N} of {L}.",
    "The {N} {R} the {N} was {A} and {A}.",
    "{P} liked to {t} the {N} {W}.",
    "Once more the {A} {N} {I}, and {L} grew {A}.",
    "Whoever {T} the {N} also {T} the {N}.",
};

constexpr std::string_view kNoise[] = {
    "The meadow is wide.", "The clouds are white.", "The wind is mild.",
    "The road goes on.",   "The day is long.",
};

template <typename T, size_t N>
std::span<const T> Span(const T (&a)[N]) {
  return std::span<const T>(a, N);
}

bool StartsWithVowel(std::string_view w) {
  if (w.empty()) return false;
  const char c = w[0];
  return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' || c == 'A' || c == 'E' ||
         c == 'I' || c == 'O' || c == 'U';
}

std::string FillSlot(char slot, Rng& rng) {
  switch (slot) {
    case 'A':
      return std::string(rng.Pick(Span(kAdjectives)));
    case 'N':
      return std::string(rng.Pick(Span(kNouns)));
    case 'T':
      return std::string(rng.Pick(Span(kTransitiveVerbs)).past);
    case 't':
      return std::string(rng.Pick(Span(kTransitiveVerbs)).base);
    case 'I':
      return std::string(rng.Pick(Span(kIntransitivePast)));
    case 'D':
      return std::string(rng.Pick(Span(kAdverbs)));
    case 'P':
      return std::string(rng.Pick(Span(kNames)));
    case 'L':
      return std::string(rng.Pick(Span(kPlaces)));
    case 'W':
      return std::string(rng.Pick(Span(kTimes)));
    case 'R':
      return std::string(rng.Pick(Span(kPrepositions)));
    default:
      Check(false, "unknown prose template slot");
      return {};
  }
}

}  // namespace

std::span<const std::string_view> Adjectives() { return Span(kAdjectives); }
std::span<const std::string_view> Nouns() { return Span(kNouns); }
std::span<const std::string_view> Adverbs() { return Span(kAdverbs); }

std::vector<std::string> RealWordPool() {
  std::set<std::string> seen;
  std::vector<std::string> out;
  const auto add = [&](std::string_view w) {
    if (seen.insert(std::string(w)).second) out.emplace_back(w);
  };
  for (std::string_view w : kAdjectives) add(w);
  for (std::string_view w : kNouns) add(w);
  for (const Verb& v : kTransitiveVerbs) add(v.base);
  for (std::string_view w : kAdverbs) add(w);
  return out;
}

std::string PseudoWord(uint64_t i) {
  static constexpr std::string_view kConsonants = "bdfgklmnprstvz";
  static constexpr std::string_view kVowels = "aeiou";
  const uint64_t syllables = kConsonants.size() * kVowels.size();
  std::string w;
  for (int k = 0; k < 3; ++k) {
    const uint64_t s = i % syllables;
    i /= syllables;
    w += kConsonants[s / kVowels.size()];
    w += kVowels[s % kVowels.size()];
  }
  return w;
}

std::string RandomWordKey(Rng& rng) {
  std::string key(rng.Pick(Span(kAdjectives)));
  key += '-';
  key += rng.Pick(Span(kNouns));
  return key;
}

std::string RandomNumber7(Rng& rng) { return std::to_string(rng.Between(1000000, 9999999)); }

std::string RandomUuid(Rng& rng) {
  static constexpr char kHex[] = "0123456789abcdef";
  const uint64_t hi = rng.Next(), lo = rng.Next();
  std::string out;
  for (int i = 0; i < 32; ++i) {
    const uint64_t word = i < 16 ? hi : lo;
    uint64_t nibble = (word >> (4 * (15 - i % 16))) & 0xF;
    if (i == 12) nibble = 4;                 // version 4
    if (i == 16) nibble = 8 | (nibble & 3);  // RFC 4122 variant
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    out += kHex[nibble];
  }
  return out;
}

std::string RandomUpperName(Rng& rng, int letters) {
  std::string out;
  for (int i = 0; i < letters; ++i) out += static_cast<char>('A' + rng.Below(26));
  return out;
}

std::string ProseSentence(Rng& rng) {
  const std::string_view tmpl = rng.Pick(Span(kTemplates));
  std::string out;
  bool article_pending = false;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '{' && i + 2 < tmpl.size() && tmpl[i + 2] == '}') {
      const char slot = tmpl[i + 1];
      i += 2;
      if (slot == 'a') {
        article_pending = true;
        continue;
      }
      std::string word = FillSlot(slot, rng);
      if (article_pending) {
        out += StartsWithVowel(word) ? "an " : "a ";
        article_pending = false;
      }
      out += word;
    } else if (article_pending && tmpl[i] == ' ') {
      // The space after {a} is written once the next word (and so the article) is known.
    } else {
      if (article_pending) Check(false, "{a} must precede a slot");
      out += tmpl[i];
    }
  }
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

std::span<const std::string_view> NoiseSentences() { return Span(kNoise); }

}  // namespace primekv::eval_internal
