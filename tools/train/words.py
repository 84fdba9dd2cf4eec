"""Hand-written word lists for the synthetic data generator (our own, no external corpus)."""

NOUNS = """
apple anchor angle animal answer arch army arrow autumn badge bag bakery ball band bank barn
basket beach bean bear bed bell bench berry bird blanket boat bone book boot bottle bowl box
branch bread brick bridge brush bucket cabin cable cake camera camp candle canyon cap car card
carpet castle cat cave chain chair chalk cherry chest chimney circle city clay cliff clock cloud
coast coat coin comet copper corner cottage cotton court cow crane crow crown cup curtain
daisy dancer desert desk diamond dinner doctor dog door dragon drawer dream drum duck eagle
earth engine farm feather fence field finger fire fish flag flame flower fog forest fork
fountain fox frog garden gate giant glass glove goat gold grape grass guitar hall hammer harbor
hat hawk hill horse house island jacket jar jewel kettle key kitchen kite knife ladder lake
lamp lantern leaf lemon letter library lily lion map market meadow mirror monkey moon mountain
mouse nail needle nest net night ocean office orange owl paint palace paper parrot path pearl
pencil piano pillow pine planet plate pocket pond pony queen rabbit rain river road robin rock
roof rope rose sail salt sand scarf school sea seed shadow sheep shell ship shoe shore silver
sky snow sock soldier song spoon spring square star station stone storm stove street string sun
swan table tail teacher tent thread tiger tower town toy train tree truck tunnel turtle valley
village violin wagon wall watch water wave whale wheel window wing winter wolf wood wool yard
""".split()

ADJECTIVES = """
able ancient angry bitter black bold brave bright broad broken brown busy calm careful cheap
clean clever cold cool crisp curious damp dark deep dry dusty eager early easy empty faint fair
fancy fast fierce flat fresh friendly full gentle giant glad golden gray great green happy
hard heavy hidden high hollow honest huge humble icy jolly kind large late lazy light little
lively lonely long loud lucky mighty mild modern narrow neat new noble odd old pale plain
polite poor proud purple quick quiet rapid rare red rich rough round royal rusty sad safe
salty sharp shiny short shy silent simple slow small smooth soft solid sour steady steep still
strange strong sunny sweet swift tall tame tender thick thin tidy tiny tired warm weak wet
white wide wild wise wooden yellow young
""".split()

VERBS = """
carry paint build find watch follow open close push pull lift hold keep move read write visit
clean fix paint draw fill guard hide mark count cross climb reach pass order sort stack store
bring send share check
""".split()

PAST_VERBS = """
walked jumped painted built found watched followed opened closed pushed pulled lifted held kept
moved read wrote visited cleaned fixed drew filled guarded hid marked counted crossed climbed
reached passed sorted stacked stored brought sent shared checked carried rested waited looked
sang danced laughed slept wandered waved smiled listened started stopped turned worked
""".split()

INTRANS_PAST = """
rested waited slept wandered smiled laughed danced sang worked stopped started listened arrived
returned stayed shouted whispered hurried paused
""".split()

ADVERBS = """
slowly quickly quietly gently loudly happily sadly carefully suddenly softly calmly early late
often rarely again together alone
""".split()

PREPOSITIONS = """
near behind under over beside across along through around inside outside above below past
toward beyond
""".split()

PEOPLE = """
Anna Ben Clara David Elena Felix Grace Hugo Iris Jonas Kara Leo Maya Nora Oscar Paula Quinn
Rosa Sam Tara Umar Vera Walter Xena Yara Zane Omar Lina Milo Nina
""".split()

TIMES = """
morning evening night noon afternoon winter summer spring autumn weekend dawn dusk
""".split()

# Syllables for pseudo-words: keys and values that the tokenizer splits into sub-pieces,
# so that the model learns to match and copy arbitrary piece sequences.
ONSETS = "b c d f g h j k l m n p r s t v w z br cr dr fr gr kl pl pr sk sl st tr ch sh th".split()
NUCLEI = "a e i o u ai ea ee oo ou".split()
CODAS = ["", "", "", "n", "r", "l", "s", "t", "m", "k", "nd", "st", "rk"]

# ---------------------------------------------------------------------------- second model
# Extra vocabulary for the second reference model's filler (tools/train/data.py, "v2").
TOPICS = """
weather harvest trade travel repairs music cooking fishing weaving mining sailing farming
building teaching painting gardening rowing hunting baking brewing printing
""".split()

ROLES = """
clerk miller baker sailor farmer guard mason carpenter weaver potter smith merchant scribe
captain keeper porter ranger shepherd tailor cook
""".split()

UNITS = "crates barrels sacks boxes bundles baskets jars rolls carts loads".split()

WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()

MONTHS = """
January February March April May June July August September October November December
""".split()

LOG_EVENTS = """
arrived departed stopped resumed checked delayed loaded unloaded inspected sealed opened
reported counted repaired cleared
""".split()
