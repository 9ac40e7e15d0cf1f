"""The held-out evaluation prompts: hand-written chat and code prompts and reserved math templates.

Nothing here is used to build the training corpus: these topics, tasks and math scenarios are
reserved for held-out evaluation only, so no held-out prompt is a slot-variant of a training
prompt (make_training_corpus.py also checks that no training prompt shares a held-out key).
Written for minispark; none of it comes from a public evaluation set.

    python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import random

CHAT = [
    "How do tsunamis form, and why are they so much more dangerous than ordinary waves?",
    "My sister is turning thirty and loves board games and hiking. Suggest a day-long celebration plan.",
    "Epidemic, pandemic, endemic: how do public-health experts tell these apart?",
    "Explain how a sailboat can move against the wind.",
    "I'm a nurse starting night shifts next month. How can I protect my sleep and my social life?",
    "A poem, please, short and sweet, about a kettle coming to the boil.",
    "Why do onions make people cry, and what actually helps?",
    "Give me a gentle way to tell a friend that their business idea has a serious flaw.",
    "How did medieval people keep food from spoiling without refrigerators?",
    "What makes a bridge able to carry heavy trucks? Explain arches, beams and suspension bridges.",
    "Describe a typical day of a lighthouse engineer in the 1890s, as a short story.",
    "I inherited a small vinyl record collection. How should I store and clean it?",
    "What does a sommelier actually do?",
    "Explain how credit unions differ from ordinary banks.",
    "Write a welcome message for new members of a neighbourhood book-swap group.",
    "Why do some people hear music in their head that won't go away? What are earworms?",
    "How do hot-air balloons steer if they just float with the wind?",
    "What are the main stages of grief, and is the model still accepted by psychologists?",
    "I want to write letters to my future self. Give me prompts for the first five letters.",
    "How are bank notes protected against counterfeiting?",
    "Explain why cats purr, including what scientists are still unsure about.",
    "Plan a three-day itinerary for a rainy autumn trip to a coastal town, with indoor options.",
    "Baking versus roasting: is there a real difference in the oven, or is it just a word?",
    "Tell me about the invention of the zipper.",
    "How can a choir sing in tune without instruments?",
    "My elderly father wants to use video calls. How do I teach him over the phone?",
    "Why is the Dead Sea so salty, and why can people float in it?",
    "Write a persuasive paragraph encouraging teenagers to try birdwatching.",
    "What happens in the body during a sneeze?",
    "How do libraries decide which books to remove from their shelves?",
    "I've never watched a football match. What is the offside rule, in plain words?",
    "I'm hosting a family reunion for forty people in a park. What should I organise first?",
    "Describe how a violin produces sound.",
    "Can you really make butter from cream at home with a jar? How?",
    "Why do we get goosebumps?",
    "I'm off sailing for two weeks. Draft a cheerful auto-reply for my inbox.",
    "How does a lock-and-key mechanism in a pin tumbler lock work?",
    "What are the pros and cons of keeping chickens in a suburban garden?",
    "Explain how a referendum differs from a general election.",
    "How can I tell whether a mushroom I found is safe? Be careful and honest.",
    "Why do mirrors flip left and right but not up and down?",
    "Suggest a reading routine for someone who falls asleep after two pages.",
    "What did people use before toothpaste?",
    "I'm learning to knit. What should my first three projects be?",
    "Explain how a thermostat keeps a room at a steady temperature.",
    "Tell me a fairy tale, a short one, about a stubborn snail who wants to see the sea.",
    "How do airlines decide ticket prices?",
    "What is the etiquette for tipping when travelling in a country you don't know?",
    "Why do bubbles in a glass of soda rise in lines?",
    "My cousin is visiting from abroad for a week. How do I make them feel at home?",
    "Explain why bread goes stale, and why toasting helps.",
    "What were the ideas behind the garden-city movement in urban planning?",
    "Give me a short motivational note for a student retaking an exam.",
    "How do glow sticks produce light?",
    "What is the best way to learn the names of constellations?",
    "A limerick about a forgetful beekeeper, please!",
    "How does a hearing aid help, and how is it different from a cochlear implant?",
    "My apartment gets very hot in summer and I have no air conditioning. What can I do?",
    "Explain what a carbon footprint is and how it is estimated for a product.",
    "Why do church bells sound different from one another?",
    "What should I know before joining a community choir?",
    "Summarise the main ideas of the slow-food movement.",
    "How can a small museum attract younger visitors?",
    "How do beavers build dams, and why do they matter for rivers?",
    "Write a two-sentence horror story set in a laundromat.",
    "How does a pressure cooker cook food faster?",
    "What are good questions to ask when visiting a daycare for my toddler?",
    "Why is it harder to boil an egg on a mountain?",
    "Describe the life of a honeybee drone.",
    "What should I bring to a housewarming party of someone I barely know?",
]

CODE = [
    "How long is the Collatz sequence that starts at n? I'd like Python code that computes it.",
    "Python: how can I tell whether a string is a valid IPv4 address? Code please.",
    "In Python, find the longest run of identical consecutive characters in a string and return the character and the run length.",
    "Spreadsheet columns go A, B, ..., Z, AA, AB. Give me Python that turns a column number into those letters.",
    "Implement a simple Bloom filter class in Python with add and might_contain methods.",
    "Parse INI-style text into a dictionary of sections, in Python, without configparser.",
    "Write a Python generator that yields the rows of Pascal's triangle.",
    "Without the datetime module, how would I compute the weekday of a date in Python?",
    "Implement Conway's Game of Life step function for a grid of booleans in Python.",
    "Friends paid different amounts for a shared dinner. Code a Python helper that settles who owes whom.",
    "Write a Python class for a to-do list that supports adding, completing and listing tasks by priority.",
    "Python helper wanted: join a list of names as 'A, B and C' (and handle one or two names).",
    "Write a Python script that reads a CSV of expenses and prints the total per category.",
    "Given a 3x3 tic-tac-toe board as a list of strings, how do I find the winner in Python?",
    "Count the business days between two dates in Python. Weekends don't count; ignore holidays.",
    "Sorted integers like [1, 2, 3, 5, 7, 8, 9] should print as '1-3,5,7-9'. Python code for that?",
    "A word-search puzzle: find every word from a list in a grid of letters, horizontally or vertically. Python, please.",
    "EAN-13 barcodes end in a check digit. Show me Python code that computes it from the first twelve digits.",
    "Flatten {'a': {'b': 1}} into {'a.b': 1} for arbitrary nesting, in Python.",
    "Write a Python context manager that times the block it wraps and prints the elapsed time.",
    "My calendar is a list of (start, end) meetings. Python code to detect any overlap?",
    "Turn 125 minutes into '2 hours 5 minutes' (with correct plurals) using Python.",
    "Print an ASCII bar chart from a dict of counts in Python, bars scaled to 40 characters.",
    "Write a Python class that represents a fraction and supports addition and simplification.",
    "Which words can be typed with one row of a QWERTY keyboard? Python code that finds the longest in a list.",
    "Explain what this Python code prints and why:\n\n```python\nx = [[0] * 3] * 3\nx[0][0] = 1\nprint(x)\n```",
    "Walk me through this Python:\n\n```python\ndef g(s):\n    seen = set()\n    return [c for c in s if not (c in seen or seen.add(c))]\n```",
    "Why does this Python code print False?\n\n```python\nprint(round(2.675, 2) == 2.68)\n```",
    "Fix this Python function, which should return the average word length but returns wrong values:\n\n```python\ndef avg_word_len(text):\n    words = text.split(' ')\n    return sum(len(w) for w in words) / len(text)\n```",
    "This Python code should print each key with its value but prints only the keys. Fix it:\n\n```python\nstock = {'apples': 3, 'pears': 5}\nfor item in stock:\n    print(item)\n```",
    "What pytest cases would you write for `is_anagram_sentence(a: str, b: str) -> bool`, which ignores spaces and case? Write them out.",
    "`parse_money(text: str) -> int` turns '$1,234.50' into 123450 cents. Give me a pytest file that pins this behaviour down.",
    "I need this in JavaScript too:\n\n```python\ndef initials(name):\n    return ''.join(part[0].upper() for part in name.split())\n```",
    "Convert this Python function to Rust:\n\n```python\ndef count_upper(s):\n    return sum(1 for c in s if c.isupper())\n```",
    "JavaScript: group an array of objects by one of their keys, without lodash.",
    "Is there a sleep(ms) in JavaScript that I can await? If not, how would one write it?",
    "Validate hex colours like '#1a2b3c' or '#abc' in JavaScript; show a few checks.",
    "Explain what this JavaScript prints:\n\n```js\nconsole.log([1, 2, 3].map(parseInt));\n```",
    "TypeScript: model a user profile whose address is optional, and print the city only when there is one.",
    "In C, how do I get the index of the largest value in an int array (and what if it is empty)?",
    "Write a C program that reads integers from standard input and prints their sum and maximum.",
    "Fix this C code, which should copy a string but crashes:\n\n```c\nchar *copy(const char *s) {\n    char *out = malloc(strlen(s));\n    strcpy(out, s);\n    return out;\n}\n```",
    "Write a C++ class for a 2D point with distance and equality operators.",
    "Count the words in a std::string in C++, where any whitespace separates words.",
    "Most common character of a &str in Rust: what's the idiomatic approach?",
    "Rust: read 'key=value' lines into a HashMap and skip lines that don't parse.",
    "Explain why this Rust code fails to compile and fix it:\n\n```rust\nfn main() {\n    let v = vec![1, 2, 3];\n    let first = &v[0];\n    let mut w = v;\n    w.push(4);\n    println!(\"{}\", first);\n}\n```",
    "Go: reverse the order of the words in a sentence, e.g. 'a b c' becomes 'c b a'.",
    "Write a Go program that reads lines from standard input and prints them with line numbers.",
    "Java: does a sentence use every letter of the alphabet? A static method that answers this, please.",
    "Write a Java class for a simple bank of lockers where lockers can be reserved and released.",
    "Given tables members(id, name, joined_on) and visits(member_id, visited_on), write a SQL query listing members who have not visited in the last 90 days.",
    "Given a table temperatures(city, day, celsius), write a SQL query that returns each city's hottest day.",
    "Explain what this SQL does:\n\n```sql\nSELECT a.name FROM staff a JOIN staff b ON a.manager_id = b.id WHERE a.salary > b.salary;\n```",
    "A Bash script that says good morning, good afternoon or good evening depending on the hour?",
    "Which five file extensions are most common under a directory tree? One line of Bash, please.",
    "Explain this Bash command:\n\n```bash\ntar -czf site-$(date +%F).tgz --exclude='*.tmp' site/\n```",
    "Shallow copy versus deep copy in Python: show me an example where the choice matters.",
    "Explain what the Python GIL is and when it limits performance.",
    "How should I structure a small Python project with a package, tests and a command-line entry point?",
    "List the n most recently modified files of a directory from Python.",
    "Write a Python dataclass for a recipe with ingredients and a method that scales quantities.",
    "Collapse repeated consecutive log lines into 'line (xN)' with a bit of Python.",
    "Python: turn a Markdown heading line like '## Title' into '<h2>Title</h2>'.",
    "Python: given a list of (timestamp, temperature) pairs, find the longest stretch of rising temperatures.",
    "What does Python's `__slots__` do, and when is it worth using?",
    "In Go, what is the difference between a nil slice and an empty slice? Show when it matters.",
    "Sketch a tiny key-value store in Python that persists to a JSON file and survives a crash mid-write.",
    "My Python script gets slower the longer it runs. How do I find out whether memory is leaking?",
    "JavaScript: how do I cancel a fetch request that takes longer than five seconds?",
]

NAMES = ["Asha", "Bjorn", "Celine", "Dario", "Eun-ji", "Felix", "Gita", "Henrik", "Iris", "Joao"]


def math_prompts(seed: int, per_family: int) -> list[str]:
    """Held-out math word problems from scenario families that the training generator never uses."""
    rng = random.Random(seed)

    def tiles() -> str:
        w, h, s = rng.randint(3, 9), rng.randint(3, 9), rng.choice([20, 25, 50])
        return (f"A kitchen floor measures {w} m by {h} m. Square tiles are {s} cm on a side and come in boxes "
                f"of {rng.choice([10, 12, 20])}. How many boxes are needed, with 10% extra for cutting?")

    def recipe() -> str:
        serves, want = rng.choice([4, 6, 8]), rng.choice([3, 5, 10, 12])
        flour = rng.choice(["1 1/2", "2 1/4", "3/4", "2 2/3"])
        return (f"A soup recipe for {serves} people uses {flour} cups of lentils. How many cups are needed "
                f"for {want} people? Give the answer as a mixed number.")

    def meeting() -> str:
        d, a, b = rng.randint(20, 90), rng.randint(10, 25), rng.randint(10, 25)
        return (f"{rng.choice(NAMES)} and {rng.choice(NAMES)} cycle towards each other from villages {d} km "
                f"apart, at {a} km/h and {b} km/h. After how many minutes do they meet?")

    def savings() -> str:
        goal, start, weekly = rng.randint(30, 90) * 10, rng.randint(2, 20) * 5, rng.randint(3, 12) * 5
        return (f"{rng.choice(NAMES)} wants a bike costing ${goal}. They have ${start} and save ${weekly} every "
                "week. After how many weeks can they buy it?")

    def mixture() -> str:
        a, pa, pb = rng.randint(2, 8), rng.choice([10, 20, 30]), rng.choice([50, 60, 80])
        return (f"How many litres of a {pb}% juice drink must be added to {a} litres of a {pa}% drink to "
                f"get a {(pa + pb) // 2}% mix? Show the equation you solve.")

    families = [tiles, recipe, meeting, savings, mixture]
    return [family() for family in families for _ in range(per_family)]
