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
    "What is the difference between an epidemic and a pandemic?",
    "Explain how a sailboat can move against the wind.",
    "I'm a nurse starting night shifts next month. How can I protect my sleep and my social life?",
    "Write a short poem about a kettle coming to the boil.",
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
    "What is the difference between baking and roasting?",
    "Tell me about the invention of the zipper.",
    "How can a choir sing in tune without instruments?",
    "My elderly father wants to use video calls. How do I teach him over the phone?",
    "Why is the Dead Sea so salty, and why can people float in it?",
    "Write a persuasive paragraph encouraging teenagers to try birdwatching.",
    "What happens in the body during a sneeze?",
    "How do libraries decide which books to remove from their shelves?",
    "Explain the offside rule in football to someone who has never watched a match.",
    "I'm hosting a family reunion for forty people in a park. What should I organise first?",
    "Describe how a violin produces sound.",
    "What is a sourdough-free way to make crusty bread at home? Keep it short.",
    "Why do we get goosebumps?",
    "Write a cheerful out-of-office email for someone on a two-week sailing trip.",
    "How does a lock-and-key mechanism in a pin tumbler lock work?",
    "What are the pros and cons of keeping chickens in a suburban garden?",
    "Explain how a referendum differs from a general election.",
    "How can I tell whether a mushroom I found is safe? Be careful and honest.",
    "Why do mirrors flip left and right but not up and down?",
    "Suggest a reading routine for someone who falls asleep after two pages.",
    "What did people use before toothpaste?",
    "I'm learning to knit. What should my first three projects be?",
    "Explain how a thermostat keeps a room at a steady temperature.",
    "Write a short fairy tale about a stubborn snail who wants to see the sea.",
    "How do airlines decide ticket prices?",
    "What is the etiquette for tipping when travelling in a country you don't know?",
    "Why do bubbles in a glass of soda rise in lines?",
    "My cousin is visiting from abroad for a week. How do I make them feel at home?",
    "Explain why bread goes stale, and why toasting helps.",
    "What were the ideas behind the garden-city movement in urban planning?",
    "Give me a short motivational note for a student retaking an exam.",
    "How do glow sticks produce light?",
    "What is the best way to learn the names of constellations?",
    "Compose a limerick about a forgetful beekeeper.",
    "How does a hearing aid help, and how is it different from a cochlear implant?",
    "My apartment gets very hot in summer and I have no air conditioning. What can I do?",
    "Explain what a carbon footprint is and how it is estimated for a product.",
    "Why do church bells sound different from one another?",
    "What should I know before joining a community choir?",
    "Summarise the main ideas of the slow-food movement.",
    "How can a small museum attract younger visitors?",
    "Explain how tides affect fishing, in a few sentences.",
    "Write a two-sentence horror story set in a laundromat.",
    "How does a pressure cooker cook food faster?",
    "What are good questions to ask when visiting a daycare for my toddler?",
    "Why is it harder to boil an egg on a mountain?",
    "Describe the life of a honeybee drone.",
    "Give me advice for a first conversation with a new neighbour.",
]

CODE = [
    "Write a Python function that returns the length of the Collatz sequence starting at n.",
    "Write a Python function that checks whether a string is a valid IPv4 address.",
    "In Python, find the longest run of identical consecutive characters in a string and return the character and the run length.",
    "Write a Python function that converts a spreadsheet column number (1, 2, ..., 27) into its letters (A, B, ..., AA).",
    "Implement a simple Bloom filter class in Python with add and might_contain methods.",
    "Write a Python function that parses an INI-style text into a dictionary of sections.",
    "Write a Python generator that yields the rows of Pascal's triangle.",
    "Write a Python function that returns the day of the week for a given date without using the datetime module.",
    "Implement Conway's Game of Life step function for a grid of booleans in Python.",
    "Write a Python function that splits a bill among friends given who paid what, and returns who owes whom.",
    "Write a Python class for a to-do list that supports adding, completing and listing tasks by priority.",
    "Write a Python function that formats a list of names as 'A, B and C'.",
    "Write a Python script that reads a CSV of expenses and prints the total per category.",
    "Write a Python function that checks whether a 3x3 tic-tac-toe board has a winner.",
    "Write a Python function that returns the number of business days between two dates.",
    "In Python, implement a function that compresses a sorted list of integers into range strings like '1-3,5,7-9'.",
    "Write a Python function that finds all words in a grid of letters (horizontal and vertical only).",
    "Write a Python function that computes the checksum digit of an EAN-13 barcode.",
    "Write a Python function that turns a nested dictionary into flat keys joined with dots.",
    "Write a Python context manager that times the block it wraps and prints the elapsed time.",
    "Write a Python function that detects whether a list of meeting times has any conflicts.",
    "Write a Python function that converts a number of minutes into a human-friendly string like '2 hours 5 minutes'.",
    "Write a Python function that generates a simple ASCII bar chart from a dictionary of counts.",
    "Write a Python class that represents a fraction and supports addition and simplification.",
    "Write a Python function that finds the longest word that can be typed using only one row of a QWERTY keyboard.",
    "Explain what this Python code prints and why:\n\n```python\nx = [[0] * 3] * 3\nx[0][0] = 1\nprint(x)\n```",
    "Explain what this Python code does:\n\n```python\ndef g(s):\n    seen = set()\n    return [c for c in s if not (c in seen or seen.add(c))]\n```",
    "Why does this Python code print False?\n\n```python\nprint(round(2.675, 2) == 2.68)\n```",
    "Fix this Python function, which should return the average word length but returns wrong values:\n\n```python\ndef avg_word_len(text):\n    words = text.split(' ')\n    return sum(len(w) for w in words) / len(text)\n```",
    "This Python code should print each key with its value but prints only the keys. Fix it:\n\n```python\nstock = {'apples': 3, 'pears': 5}\nfor item in stock:\n    print(item)\n```",
    "Write pytest tests for a function `is_anagram_sentence(a: str, b: str) -> bool` that ignores spaces and case.",
    "Write pytest tests for a function `parse_money(text: str) -> int` that converts strings like '$1,234.50' into cents.",
    "Convert this Python code to JavaScript:\n\n```python\ndef initials(name):\n    return ''.join(part[0].upper() for part in name.split())\n```",
    "Convert this Python function to Rust:\n\n```python\ndef count_upper(s):\n    return sum(1 for c in s if c.isupper())\n```",
    "Write a JavaScript function that groups an array of objects by the value of a given key.",
    "Write a JavaScript function that returns a promise which resolves after a given number of milliseconds.",
    "Write a JavaScript function that validates a hex colour string like '#1a2b3c' or '#abc'.",
    "Explain what this JavaScript prints:\n\n```js\nconsole.log([1, 2, 3].map(parseInt));\n```",
    "Write a TypeScript type for a user profile with an optional address and a function that prints the city if present.",
    "Write a C function that returns the index of the largest element of an int array.",
    "Write a C program that reads integers from standard input and prints their sum and maximum.",
    "Fix this C code, which should copy a string but crashes:\n\n```c\nchar *copy(const char *s) {\n    char *out = malloc(strlen(s));\n    strcpy(out, s);\n    return out;\n}\n```",
    "Write a C++ class for a 2D point with distance and equality operators.",
    "Write a C++ function that counts the words in a std::string, treating any whitespace as a separator.",
    "Write a Rust function that returns the most common character in a &str.",
    "Write a Rust function that parses 'key=value' lines into a HashMap, skipping malformed lines.",
    "Explain why this Rust code fails to compile and fix it:\n\n```rust\nfn main() {\n    let v = vec![1, 2, 3];\n    let first = &v[0];\n    let mut w = v;\n    w.push(4);\n    println!(\"{}\", first);\n}\n```",
    "Write a Go function that reverses the order of words in a sentence.",
    "Write a Go program that reads lines from standard input and prints them with line numbers.",
    "Write a Java method that checks whether a string contains every letter of the alphabet.",
    "Write a Java class for a simple bank of lockers where lockers can be reserved and released.",
    "Given tables members(id, name, joined_on) and visits(member_id, visited_on), write a SQL query listing members who have not visited in the last 90 days.",
    "Given a table temperatures(city, day, celsius), write a SQL query that returns each city's hottest day.",
    "Explain what this SQL does:\n\n```sql\nSELECT a.name FROM staff a JOIN staff b ON a.manager_id = b.id WHERE a.salary > b.salary;\n```",
    "Write a Bash script that prints a greeting depending on the time of day.",
    "Write a Bash one-liner that lists the five most common file extensions in a directory tree.",
    "Explain this Bash command:\n\n```bash\ntar -czf site-$(date +%F).tgz --exclude='*.tmp' site/\n```",
    "What is the difference between a shallow copy and a deep copy in Python? Show an example where it matters.",
    "Explain what the Python GIL is and when it limits performance.",
    "How should I structure a small Python project with a package, tests and a command-line entry point?",
    "Write a Python function that returns the n most recently modified files in a directory.",
    "Write a Python dataclass for a recipe with ingredients and a method that scales quantities.",
    "Write a Python function that merges consecutive duplicate log lines into 'line (xN)'.",
    "Write a Python function that converts a Markdown heading line like '## Title' into an HTML tag.",
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
