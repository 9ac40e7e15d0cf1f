"""Write the demo prompt corpora: varied chat, math and code prompts, plus image prompts for VLMs.

``demo.jsonl`` holds the text prompts (the default for text targets such as the embedded one);
``demo_vision.jsonl`` holds the same prompts with image prompts interleaved (the default for VLMs).

Everything is made here: math word problems are generated from templates with a seeded RNG, code
tasks combine hand-written tasks with languages, and the pictures are drawn with Pillow (nothing
is downloaded). The output is deterministic, so rerunning rewrites identical files.

    .venv/bin/python examples/prompts/make_corpus.py   # writes demo.jsonl, demo_vision.jsonl, images/*.png
    .venv/bin/python -m minispark.data.prompts examples/prompts/demo.jsonl
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SEED = 20240611

CHAT = [
    "What are three good habits for staying focused while working from home?",
    "Explain the difference between weather and climate in two short paragraphs.",
    "Write a haiku about a rainy Monday morning.",
    "I have a job interview tomorrow for a junior data analyst role. What questions should I prepare for?",
    "Summarize the plot of Romeo and Juliet in five sentences.",
    "Give me a packing list for a three-day hiking trip in late autumn.",
    "How does a refrigerator keep food cold? Explain it to a ten-year-old.",
    "Suggest five names for a small bakery that specializes in sourdough.",
    "What is the difference between a virus and a bacterium?",
    "Write a polite email asking my landlord to fix a leaking kitchen tap.",
    "Why is the sky blue?",
    "Compare renting and buying a home: list the main pros and cons of each.",
    "Write a short motivational message for a friend running their first marathon.",
    "What are some tips for learning a new language as an adult?",
    "Explain what inflation is and why central banks try to control it.",
    "Describe how photosynthesis works in simple terms.",
    "Plan a vegetarian dinner menu for six guests, with a starter, main course and dessert.",
    "What should I consider when adopting a dog from a shelter?",
    "Write a limerick about a cat who learned to code.",
    "Explain the rules of chess for the knight and the bishop.",
    "How can I improve my sleep quality without medication?",
    "Write a two-paragraph story that begins with 'The lighthouse keeper had never seen the sea so still.'",
    "What is the difference between 'affect' and 'effect'? Give examples.",
    "Explain how vaccines train the immune system.",
    "Give me a 20-minute bodyweight workout I can do in a small apartment.",
    "What were the main causes of the First World War?",
    "Translate 'Where is the train station, please?' into French, Spanish and German.",
    "How do noise-cancelling headphones work?",
    "Write a product description for a reusable stainless steel water bottle.",
    "What are the benefits and risks of intermittent fasting?",
    "Explain the difference between RAM and storage in a computer.",
    "Recommend a reading list of five classic science fiction novels and say why each matters.",
    "How do I politely decline a meeting invitation that is not relevant to my work?",
    "Describe the water cycle step by step.",
    "What makes a good team leader? List the key qualities.",
    "Write a thank-you note to a teacher who helped me through a difficult year.",
    "Explain what a black hole is and how scientists detect them.",
    "What are some strategies for paying off credit card debt?",
    "Write a short dialogue between a robot and a gardener.",
    "Why do leaves change colour in autumn?",
    "Give me ideas for a birthday party for a seven-year-old who loves dinosaurs.",
    "Explain the greenhouse effect without using jargon.",
    "What is the difference between a simile and a metaphor?",
    "How should I prepare for a long-haul flight to avoid jet lag?",
    "Write a four-line poem about the first snow of winter.",
    "What are the main differences between the Roman Republic and the Roman Empire?",
    "Explain how a bill becomes a law in a parliamentary system.",
    "List some easy houseplants for a beginner and how to care for them.",
    "Describe the taste of a ripe mango to someone who has never had one.",
    "How can a small business use social media effectively on a tight budget?",
    "What is the placebo effect?",
    "Give me feedback on this opening line for a novel: 'It was the kind of morning that forgot to end.'",
    "Explain why we have leap years.",
    "What are the pros and cons of electric cars compared with petrol cars?",
    "Write a short speech for a best man at a wedding, warm and a little funny.",
    "How do bees make honey?",
    "Explain the idea of opportunity cost with an everyday example.",
    "What is mindfulness meditation and how do I start?",
    "Write a riddle whose answer is 'a shadow'.",
    "Why do we dream? Summarize the main scientific theories.",
]

CHAT_TEMPLATES = [
    ("Explain {topic} to {audience}.", None),
    ("Write a short, friendly paragraph about {topic} for {audience}.", None),
    ("What are three common misconceptions about {topic}?", None),
]
TOPICS = [
    "how the internet routes data", "compound interest", "the theory of evolution", "tides",
    "how airplanes stay in the air", "recycling plastics", "the human heart", "earthquakes",
    "supply and demand", "electric circuits", "the phases of the moon", "composting",
]
AUDIENCES = ["a curious eight-year-old", "a busy executive", "a high-school student", "my grandmother"]

SYSTEM_PROMPTS = [
    "You are a concise assistant. Answer in at most five sentences.",
    "You are a patient tutor who explains step by step.",
    "You are a helpful assistant.",
]

FOLLOW_UPS = [
    ("Can you recommend a good first programming language?",
     "Python is a popular first language: its syntax is readable and it is used everywhere.",
     "What kinds of small projects should I build with it in my first month?"),
    ("I want to start running. How often should I run each week?",
     "Three runs a week with rest days in between is a good start.",
     "How do I avoid knee pain when I increase my distance?"),
    ("What is a good way to organise my week?",
     "Try planning on Sunday evening: list priorities, then block time for each.",
     "How do I handle tasks that keep getting postponed?"),
]

CODE_TASKS = [
    "reverses the words in a sentence",
    "checks whether a string is a palindrome, ignoring punctuation and case",
    "returns the n-th Fibonacci number iteratively",
    "merges two sorted lists into one sorted list",
    "counts how often each word appears in a text",
    "finds the longest common prefix of a list of strings",
    "implements binary search on a sorted array",
    "removes duplicate items from a list while keeping their order",
    "converts a Roman numeral to an integer",
    "validates that brackets in an expression are balanced",
    "computes the greatest common divisor of two integers",
    "flattens a nested list of arbitrary depth",
    "rotates a square matrix by 90 degrees clockwise",
    "returns all prime numbers below n using the sieve of Eratosthenes",
    "groups a list of words into anagram groups",
    "parses a CSV line that may contain quoted fields with commas",
    "implements a least-recently-used cache with a fixed capacity",
    "computes the edit distance between two strings",
    "checks whether a binary tree is a valid binary search tree",
    "finds the two numbers in an array that add up to a target",
]
LANGUAGES = ["Python", "JavaScript", "Rust", "Go", "C++"]

CODE_FREEFORM = [
    "Explain what this Python code does and suggest an improvement:\n\n```python\ndef f(xs):\n    out = []\n    for i in range(len(xs)):\n        if xs[i] % 2 == 0:\n            out.append(xs[i] * xs[i])\n    return out\n```",
    "Why does this JavaScript print 3 three times, and how do I fix it?\n\n```js\nfor (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 0);\n}\n```",
    "Write a SQL query that returns the five customers with the highest total order value from tables customers(id, name) and orders(id, customer_id, amount).",
    "What is the difference between a process and a thread?",
    "Explain big-O notation with examples of O(1), O(n) and O(n log n).",
    "Write a bash one-liner that counts the lines of all .py files in a directory tree.",
    "What does `git rebase` do, and when should I prefer it over `git merge`?",
    "Write a Python dataclass for a bank account with deposit and withdraw methods that refuse overdrafts.",
    "Explain the difference between `==` and `is` in Python.",
    "Fix the bug in this function:\n\n```python\ndef average(xs):\n    return sum(xs) / len(xs) if xs else None\n\nprint(average([]) + 1)\n```",
    "Write a regular expression that matches ISO dates like 2024-03-15 and explain each part.",
    "How do I read a large file line by line in Python without loading it all into memory?",
    "Explain recursion and write a recursive function that sums a nested list.",
    "What are Python generators and why are they useful?",
    "Write unit tests with pytest for a function `slugify(title: str) -> str`.",
    "Explain what a race condition is and show a small example in Python with threads.",
    "Write a Dockerfile for a small Flask application.",
    "What is the difference between a list and a tuple in Python?",
    "Explain how a hash map works internally.",
    "Write a function in TypeScript that debounces another function.",
]


def math_problems(rng: random.Random, count: int) -> list[str]:
    names = ["Ava", "Ben", "Chloe", "Dev", "Elif", "Femi", "Grace", "Hiro", "Ines", "Jonas", "Kira", "Liam"]
    items = ["apples", "notebooks", "marbles", "stickers", "pencils", "cookies", "stamps", "shells"]

    def shopping() -> str:
        n, price, pay = rng.randint(3, 12), rng.randint(2, 9), 0
        pay = (n * price // 10 + 1) * 10 + rng.choice([0, 10, 20])
        return (f"{rng.choice(names)} buys {n} {rng.choice(items)} at ${price} each and pays with ${pay}. "
                "How much change do they get?")

    def speed() -> str:
        v, t = rng.randint(30, 110), rng.randint(2, 7)
        return (f"A train travels at {v} km/h for {t} hours and then at {v + rng.randint(5, 30)} km/h for "
                f"{rng.randint(1, 4)} more hours. How far does it travel in total?")

    def percent() -> str:
        p, x = rng.choice([10, 15, 20, 25, 30, 40]), rng.randint(20, 400)
        return f"A jacket costs ${x}. It is on sale for {p}% off. What is the sale price?"

    def share() -> str:
        a, b, total = rng.randint(1, 5), rng.randint(1, 5), rng.randint(4, 30) * 12
        return (f"{rng.choice(names)} and {rng.choice(names)} share ${total} in the ratio {a}:{b}. "
                "How much does each person get?")

    def ages() -> str:
        k, d = rng.randint(2, 4), rng.randint(3, 12)
        return (f"{rng.choice(names)}'s mother is {k} times as old as {rng.choice(names)}. In {d} years the sum "
                f"of their ages will be {rng.randint(40, 90)}. How old are they now? Show your reasoning.")

    def area() -> str:
        w, h, p = rng.randint(3, 20), rng.randint(3, 20), rng.randint(2, 5)
        return (f"A rectangular garden is {w} m wide and {h} m long. A path {p} m wide runs around it. "
                "What is the area of the path?")

    def work() -> str:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return f"One pipe fills a tank in {a} hours and another in {b} hours. How long do both take together?"

    def interest() -> str:
        p, r, n = rng.randint(5, 50) * 100, rng.choice([2, 3, 4, 5, 6]), rng.randint(2, 6)
        return (f"You invest ${p} at {r}% interest compounded yearly. How much do you have after {n} years? "
                "Round to the nearest cent.")

    def fractions() -> str:
        a, b, c, d = rng.randint(1, 7), rng.randint(2, 9), rng.randint(1, 7), rng.randint(2, 9)
        return f"Compute {a}/{b} + {c}/{d} and simplify the result."

    def equation() -> str:
        a, x, b = rng.randint(2, 12), rng.randint(-9, 15), rng.randint(-30, 30)
        return f"Solve for x: {a}x + {b} = {a * x + b}. Explain each step."

    def average() -> str:
        scores = [rng.randint(55, 100) for _ in range(rng.randint(4, 7))]
        return (f"A student scored {', '.join(map(str, scores))} on tests. What score is needed on the next "
                f"test to raise the average to {round(sum(scores) / len(scores)) + rng.randint(1, 4)}?")

    def probability() -> str:
        r, g, b = rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 8)
        return (f"A bag has {r} red, {g} green and {b} blue balls. Two are drawn without replacement. "
                "What is the probability that both are the same colour?")

    templates = [shopping, speed, percent, share, ages, area, work, interest, fractions, equation,
                 average, probability]
    return [templates[i % len(templates)]() for i in range(count)]


def draw_images(out: Path) -> dict[str, Path]:
    """Draw the corpus pictures (224 px: a few dozen vision tokens on Qwen2.5-VL)."""
    out.mkdir(parents=True, exist_ok=True)
    images = {}

    def save(name: str, im: Image.Image) -> None:
        path = out / f"{name}.png"
        im.save(path, optimize=True)
        images[name] = path

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    d.ellipse((20, 20, 100, 100), fill="red")
    d.rectangle((124, 30, 204, 110), fill="blue")
    d.polygon([(60, 200), (20, 130), (100, 130)], fill="green")
    d.ellipse((130, 130, 200, 200), outline="orange", width=8)
    save("shapes", im)

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    values = [40, 90, 150, 70, 120]
    colors = ["#4472c4", "#ed7d31", "#a5a5a5", "#ffc000", "#5b9bd5"]
    d.line((20, 200, 210, 200), fill="black", width=2)
    d.line((20, 20, 20, 200), fill="black", width=2)
    for i, (v, c) in enumerate(zip(values, colors)):
        x = 30 + i * 36
        d.rectangle((x, 200 - v, x + 26, 199), fill=c)
    save("bar_chart", im)

    im = Image.new("RGB", (224, 224), "#87ceeb")
    d = ImageDraw.Draw(im)
    d.rectangle((0, 160, 224, 224), fill="#3c8d2f")
    d.ellipse((160, 20, 210, 70), fill="#ffd700")
    d.rectangle((50, 100, 130, 160), fill="#b5651d")
    d.polygon([(40, 100), (90, 60), (140, 100)], fill="#8b0000")
    d.rectangle((80, 125, 100, 160), fill="#4b2e0f")
    save("house", im)

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    palette = ["red", "green", "blue", "yellow", "purple", "orange", "black", "cyan", "magenta"]
    for i, c in enumerate(palette):
        x, y = (i % 3) * 74 + 4, (i // 3) * 74 + 4
        d.rectangle((x, y, x + 68, y + 68), fill=c)
    save("color_grid", im)

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    d.ellipse((12, 12, 212, 212), outline="black", width=6)
    for k in range(12):
        a = math.radians(k * 30)
        d.line((112 + 85 * math.sin(a), 112 - 85 * math.cos(a), 112 + 95 * math.sin(a), 112 - 95 * math.cos(a)),
               fill="black", width=4)
    d.line((112, 112, 112, 40), fill="black", width=5)  # minute hand at 12
    d.line((112, 112, 162, 112), fill="black", width=8)  # hour hand at 3
    save("clock", im)

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    points = [(20, 180), (60, 150), (100, 160), (140, 90), (180, 60), (210, 40)]
    d.line(points, fill="#c00000", width=4)
    d.line((15, 205, 215, 205), fill="black", width=2)
    save("line_chart", im)

    im = Image.new("RGB", (224, 224), "#202020")
    d = ImageDraw.Draw(im)
    d.rectangle((82, 12, 142, 212), fill="#333333")
    for i, c in enumerate(["#ff2020", "#5a4a00", "#1a3a1a"]):
        d.ellipse((90, 20 + i * 64, 134, 64 + i * 64), fill=c)
    save("traffic_light", im)

    im = Image.new("RGB", (224, 224), "white")
    d = ImageDraw.Draw(im)
    d.text((20, 20), "GROCERIES", fill="black")
    for i, line in enumerate(["milk     2.40", "bread    3.10", "eggs     4.25", "apples   2.99"]):
        d.text((20, 50 + 22 * i), line, fill="black")
    d.line((20, 145, 200, 145), fill="black")
    d.text((20, 155), "TOTAL   12.74", fill="black")
    save("receipt", im)
    return images


IMAGE_PROMPTS = [
    ("shapes", "Describe the shapes in this picture and their colours."),
    ("shapes", "How many shapes are filled in, and how many are only outlined?"),
    ("shapes", "Write a riddle about one of the shapes in this image."),
    ("bar_chart", "Which bar is the tallest? Describe the chart."),
    ("bar_chart", "Estimate the value of each bar and compute their average."),
    ("bar_chart", "Suggest a title and axis labels for this chart."),
    ("house", "Write a short children's story inspired by this picture."),
    ("house", "Describe the weather and the time of day in this scene."),
    ("house", "List every object you can see in this drawing."),
    ("color_grid", "List the colours in this grid row by row."),
    ("color_grid", "Which colours in this grid are primary colours?"),
    ("color_grid", "Describe a game that could be played on this grid."),
    ("clock", "What time does this clock show?"),
    ("clock", "What time will this clock show in two and a half hours?"),
    ("clock", "Explain how to read the time on a clock like this one."),
    ("line_chart", "Describe the trend shown in this chart."),
    ("line_chart", "Where does the line rise fastest? Explain."),
    ("line_chart", "Write a one-paragraph report about what this chart might show."),
    ("traffic_light", "Which light is on, and what should a driver do?"),
    ("traffic_light", "Explain the meaning of each colour of this traffic light."),
    ("receipt", "Read this receipt. Does the total add up?"),
    ("receipt", "Which item on this receipt is the most expensive?"),
    ("receipt", "Turn this receipt into a table with item and price columns."),
    ("receipt", "If I buy two of every item on this receipt, what is the total?"),
]


def build_records(images: dict[str, Path]) -> tuple[list[dict], list[dict]]:
    """(text records, image records)."""
    rng = random.Random(SEED)
    records: list[dict] = []

    def add(category: str, **fields) -> None:
        records.append({"id": f"{category}-{sum(r['category'] == category for r in records):03d}",
                        "category": category, **fields})

    for i, text in enumerate(CHAT):
        if i % 4 == 0:
            add("chat", messages=[{"role": "system", "content": SYSTEM_PROMPTS[i % len(SYSTEM_PROMPTS)]},
                                  {"role": "user", "content": text}])
        else:
            add("chat", prompt=text)
    for template, _ in CHAT_TEMPLATES:
        for topic in TOPICS:
            add("chat", prompt=template.format(topic=topic, audience=rng.choice(AUDIENCES)))
    for first, answer, second in FOLLOW_UPS:
        add("chat", messages=[{"role": "user", "content": first}, {"role": "assistant", "content": answer},
                              {"role": "user", "content": second}])
    for i, problem in enumerate(math_problems(rng, 130)):
        if i % 5 == 0:
            add("math", messages=[{"role": "system", "content": SYSTEM_PROMPTS[1]},
                                  {"role": "user", "content": problem}])
        else:
            add("math", prompt=problem + ("" if i % 3 else " Think step by step."))
    for task in CODE_TASKS:
        for language in rng.sample(LANGUAGES, 3):
            add("code", prompt=f"Write a {language} function that {task}. Include a short example.")
    for text in CODE_FREEFORM:
        add("code", prompt=text)
    text_records = list(records)
    for i, (name, text) in enumerate(IMAGE_PROMPTS):
        rel = images[name].relative_to(HERE).as_posix()
        if i % 2 == 0:
            add("image", prompt=text, images=[rel])
        else:
            add("image", messages=[{"role": "user", "content": [{"type": "image", "image": rel},
                                                                {"type": "text", "text": text}]}])
    return text_records, records[len(text_records):]


def interleave(text: list[dict], image: list[dict]) -> list[dict]:
    """Spread the image records evenly through the text ones."""
    every = max(1, len(text) // max(1, len(image)))
    out, pending = [], list(image)
    for i, record in enumerate(text):
        out.append(record)
        if pending and i % every == every - 1:
            out.append(pending.pop(0))
    return out + pending


def write_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def main() -> None:
    images = draw_images(HERE / "images")
    text, image = build_records(images)
    for name, records in (("demo.jsonl", text), ("demo_vision.jsonl", interleave(text, image))):
        write_jsonl(HERE / name, records)
        counts: dict[str, int] = {}
        for record in records:
            counts[record["category"]] = counts.get(record["category"], 0) + 1
        print(f"wrote {HERE / name} ({len(records)} prompts: {counts})")
    print(f"wrote {len(images)} images to {HERE / 'images'}")


if __name__ == "__main__":
    main()
