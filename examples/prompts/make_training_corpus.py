"""Write the training prompt corpus, its held-out evaluation split and the VLM image-prompt corpus.

No dataset hub is reachable, so every prompt is composed here from hand-written lists and
templates with combinatorial slots (corpus_words.py, corpus_code.py, corpus_math.py,
corpus_writing.py, vision_prompts.py), filled by one seeded RNG; nothing comes from a public
evaluation set. Outputs (deterministic: rerunning rewrites identical files):

- ``corpus.jsonl``: the training prompts (chat, writing, math, code, multiturn), deduplicated by
  :func:`minispark.data.prompts.prompt_key` and mixed so that every prefix keeps the category shares.
- ``heldout.jsonl``: the fixed held-out split from heldout_prompts.py (reserved topics, tasks and
  math scenarios); no training prompt shares its key, and no training run may read it.
- ``corpus_vision.jsonl``: image prompts interleaved with the first lines of ``corpus.jsonl``.

    .venv/bin/python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import corpus_code as code
import corpus_math
import corpus_snippets
import corpus_words as words
import corpus_writing
import heldout_prompts
import vision_prompts

from minispark.data.prompts import PromptSample, prompt_key

HERE = Path(__file__).resolve().parent
SEED = 20261130
# Per-category counts; their sum is the corpus size. Shares: chat ~40 %, code ~25 %, writing and math ~15 %.
COUNTS = {"chat": 4900, "code": 3050, "writing": 1850, "math": 1850, "multiturn": 620}
VISION_IMAGES, VISION_TEXT = 360, 2400  # image prompts, and text prompts from the head of corpus.jsonl
SYSTEM_SHARE = 0.2

Record = dict  # {"prompt": ...} or {"messages": [...]}, plus "category" (and later "id")


def single(text: str, rng: random.Random, systems: list[str]) -> Record:
    """One user turn, with a system prompt on a fraction of the samples."""
    if rng.random() < SYSTEM_SHARE:
        return {"messages": [{"role": "system", "content": rng.choice(systems)}, {"role": "user", "content": text}]}
    return {"prompt": text}


def with_constraint(text: str, rng: random.Random, share: float = 0.45) -> str:
    """Append one constraint (word limit, format, tone, ...) to ``share`` of the prompts, two to a few."""
    if rng.random() >= share:
        return text
    first, second = rng.sample(words.CONSTRAINTS, 2)
    extras = [first, second] if rng.random() < 0.15 else [first]
    return " ".join([text] + [e.format(n=rng.choice([50, 80, 100, 150, 200, 300]), k=rng.randint(2, 5)) for e in extras])


# ---------------------------------------------------------------- chat
EXPLAIN = [
    "Explain {topic} to {audience}.", "Can you explain {topic} in simple terms?", "What is the basic idea behind {topic}?",
    "Give me a short overview of {topic}.", "I keep hearing about {topic}. What is it, and why does it matter?",
    "What are the most common misconceptions about {topic}?", "Write a short explainer on {topic} for {audience}.",
    "How would you teach {topic} to {audience}?", "What are three key facts everyone should know about {topic}?",
    "What questions should I ask to understand {topic} better?", "Create a five-question quiz, with answers, about {topic}.",
    "Explain {topic} using an analogy from everyday life.", "Write study notes on {topic} for {audience}.",
    "Why does {topic} matter? Give concrete examples.", "What would a beginner get wrong about {topic}?",
    "Give me a step-by-step explanation of {topic}.", "I have five minutes. Tell me the essentials of {topic}.",
    "What are the open questions or debates around {topic}?", "Outline a 30-minute lesson on {topic} for {audience}.",
    "What is the connection between {topic} and {topic2}?", "Pretend you are a museum guide explaining {topic} to visitors.",
    "Explain {topic} in exactly three sentences.", "List the key terms related to {topic} with one-line definitions.",
    "How has our understanding of {topic} changed over time?", "Tell me something surprising about {topic}.",
    "Write a short FAQ with four questions and answers about {topic}.", "tl;dr of {topic}, please.",
    "My friend thinks {topic} is boring. Convince them otherwise.", "How is {topic} relevant to everyday life?",
    "Describe {topic} as if writing an encyclopedia entry for {audience}.",
]
ADVICE = [
    "{s}. What should I do?", "{s}. Can you give me some practical advice?", "{s}. What are my options, and their trade-offs?",
    "{s}. Give me a plan for the next {period}.", "{s}. What mistakes should I avoid?", "{s}. Please be honest and direct.",
    "Advice needed: {s}. Where do I start?", "{s}, and I'm not sure how to feel about it. Any thoughts?",
    "{s}. What questions should I ask myself first?", "{s}. What would you do in my position?",
]
HOW_TO = [
    "How do I {t}?", "What's the best way to {t}?", "Give me step-by-step instructions to {t}.",
    "I've never tried to {t} before. Walk me through it.", "What do I need to {t}?",
    "What are common mistakes people make when they try to {t}?", "Write a checklist for how to {t}.",
    "Explain how to {t} in under {n} words.", "Is it hard to {t}? What should I expect?",
    "I want to {t} this weekend. How should I prepare?",
]
COMPARE = [
    "Compare {a} and {b}.", "What is the difference between {a} and {b}?", "{A} or {b}: help me decide.",
    "Make a table comparing {a} and {b} on the points that matter most.",
    "What do {a} and {b} have in common, and how do they differ?", "Explain the pros and cons of {a} versus {b}.",
]
CREATIVE = [
    "Write a {form} about {subject}.", "Write a {tone} {form} about {subject}.", "Compose a {form} about {subject} for {audience}.",
    "Could you write me a {form}? The subject: {subject}.", "I need a {form} about {subject}. Make it {tone}.",
]
BRAINSTORM = [
    "Give me {k} ideas for {x}.", "Brainstorm {k} creative options for {x}, one sentence each.",
    "I need inspiration: {x}. List {k} suggestions, cheapest first.", "What are some unusual ideas for {x}?",
]
DEBATE = [
    "Present the strongest arguments for and against {i}.", "Is {i} a good idea? Give a balanced answer.",
    "Write a short debate between two people about {i}.", "Summarise the main positions on {i} in a neutral way.",
]
ADVICE_DETAILS = [
    "I have about an hour a day for this.", "Money is tight right now.", "I've already tried a few things that didn't work.",
    "I'm an introvert, if that matters.", "I work shifts, so my schedule changes every week.",
    "I live in a small town.", "My family thinks I'm overreacting.", "I'm in my fifties.", "I'm twenty-two.",
    "I don't want to spend more than a little money on it.", "I tend to give up after a couple of weeks.",
    "I have two young kids at home.", "English is not my first language.", "I'd prefer small, gradual changes.",
]
PERIODS = ["week", "month", "three months", "year"]
ALL_TOPICS = [t for group in words.TOPICS.values() for t in group]


def chat(rng: random.Random) -> tuple[str, Record]:
    kind = rng.choices(["explain", "advice", "howto", "compare", "creative", "brainstorm", "debate"],
                       weights=[40, 12, 14, 9, 13, 7, 5])[0]
    if kind == "explain":
        template = rng.choice(EXPLAIN)
        text = template.format(topic=rng.choice(ALL_TOPICS), topic2=rng.choice(ALL_TOPICS), audience=rng.choice(words.AUDIENCES))
    elif kind == "advice":
        template = rng.choice(ADVICE)
        text = template.format(s=rng.choice(words.SITUATIONS), period=rng.choice(PERIODS))
        if rng.random() < 0.4:  # some context makes longer, more specific requests
            text = text.replace(". ", ". " + " ".join(rng.sample(ADVICE_DETAILS, rng.randint(1, 2))) + " ", 1)
    elif kind == "howto":
        template = rng.choice(HOW_TO)
        text = template.format(t=rng.choice(words.HOW_TO), n=rng.choice([50, 100, 150, 200]))
    elif kind == "compare":
        template, (a, b) = rng.choice(COMPARE), rng.choice(words.COMPARISONS)
        text = template.format(a=a, b=b, A=a[0].upper() + a[1:])
    elif kind == "creative":
        template = rng.choice(CREATIVE)
        text = template.format(form=rng.choice(words.CREATIVE_FORMS), subject=rng.choice(words.CREATIVE_SUBJECTS),
                               tone=rng.choice(words.TONES), audience=rng.choice(words.AUDIENCES))
        return f"chat/{kind}/{CREATIVE.index(template)}", single(text, rng, words.SYSTEM_PROMPTS)
    elif kind == "brainstorm":
        template = rng.choice(BRAINSTORM)
        text = template.format(k=rng.choice([3, 5, 7, 10]), x=rng.choice(words.BRAINSTORM))
    else:
        template = rng.choice(DEBATE)
        text = template.format(i=rng.choice(words.ISSUES))
    index = {"explain": EXPLAIN, "advice": ADVICE, "howto": HOW_TO, "compare": COMPARE, "brainstorm": BRAINSTORM,
             "debate": DEBATE}[kind].index(template)
    return f"chat/{kind}/{index}", single(with_constraint(text, rng), rng, words.SYSTEM_PROMPTS)


# ---------------------------------------------------------------- writing, math
def writing(rng: random.Random) -> tuple[str, Record]:
    if rng.random() < 0.7:
        text, kind, _ = corpus_writing.passage_task(rng)
        return f"writing/passage/{kind}", single(text, rng, words.WRITING_SYSTEM_PROMPTS)
    return "writing/free", single(corpus_writing.free_writing(rng), rng, words.WRITING_SYSTEM_PROMPTS)


def math_problem(rng: random.Random, families: list[Callable]) -> tuple[str, Record]:
    if rng.random() < 0.08:
        return "math/concept", single(corpus_math.concept(rng), rng, words.MATH_SYSTEM_PROMPTS)
    family = rng.choice(families)
    question, _ = family()
    return f"math/{family.__name__}", single(question + rng.choice(corpus_math.SUFFIXES), rng, words.MATH_SYSTEM_PROMPTS)


# ---------------------------------------------------------------- code
FENCES = {"Python": "python", "JavaScript": "js", "TypeScript": "ts", "C": "c", "C++": "cpp", "Rust": "rust",
          "Go": "go", "Java": "java", "SQL": "sql", "Bash": "bash"}


FIX_WITH_INTENT = [
    "This function is supposed to work like this: it {description}. But {symptom}. What's wrong?\n\n```{fence}\n{code}\n```",
    "```{fence}\n{code}\n```\n\nThis is meant to be a function that {description}, but {symptom}. Can you fix it?",
]


def code_task(rng: random.Random) -> tuple[str, Record]:
    kind = rng.choices(["write", "explain", "fix", "tests", "convert", "concept", "sql", "bash"],
                       weights=[40, 12, 12, 7, 8, 11, 5, 5])[0]
    if kind == "write":
        language, template = rng.choice(code.LANGUAGES), rng.choice(code.WRITE_TEMPLATES)
        text = template.format(language=language, task=rng.choice(code.TASKS))
        if language == "Python" and rng.random() < 0.3:
            text += " " + rng.choice(code.PY_EXTRAS)
        kind = f"write/{code.WRITE_TEMPLATES.index(template)}"
    elif kind in ("explain", "convert"):
        language, snippet = rng.choice(code.SNIPPETS) if rng.random() < 0.4 else corpus_snippets.compose(rng)[:2]
        templates = code.EXPLAIN_TEMPLATES if kind == "explain" else code.CONVERT_TEMPLATES
        template = rng.choice(templates)
        target = rng.choice([t for t in code.CONVERT_TARGETS if t != language])
        text = template.format(language=language, fence=FENCES[language], code=snippet, target=target)
        kind = f"{kind}/{templates.index(template)}"
    elif kind == "fix":
        templates, description = code.FIX_TEMPLATES, ""
        if rng.random() < 0.4:
            language, snippet, symptom = rng.choice(code.BUGS)
        else:
            language, snippet, description, symptom = corpus_snippets.compose(rng, buggy=True)
            templates = code.FIX_TEMPLATES + FIX_WITH_INTENT
        template = rng.choice(templates)
        text = template.format(language=language, fence=FENCES[language], code=snippet, symptom=symptom,
                               Symptom=symptom[0].upper() + symptom[1:], description=description)
        kind = f"fix/{templates.index(template)}"
    elif kind == "tests":
        (signature, behaviour), template = rng.choice(code.TEST_TARGETS), rng.choice(code.TEST_TEMPLATES)
        text = template.format(signature=signature, behaviour=behaviour, framework=rng.choice(code.TEST_FRAMEWORKS))
        kind = f"tests/{code.TEST_TEMPLATES.index(template)}"
    elif kind == "concept":
        template = rng.choice(code.CONCEPT_TEMPLATES)
        text = template.format(concept=rng.choice(code.CONCEPTS), language=rng.choice(code.LANGUAGES))
        kind = f"concept/{code.CONCEPT_TEMPLATES.index(template)}"
    elif kind == "sql":
        template = rng.choice(code.SQL_TEMPLATES)
        text = template.format(schema=rng.choice(code.SQL_SCHEMAS), task=rng.choice(code.SQL_TASKS))
        kind = f"sql/{code.SQL_TEMPLATES.index(template)}"
    else:
        template = rng.choice(code.BASH_TEMPLATES)
        text = template.format(task=rng.choice(code.BASH_TASKS))
        kind = f"bash/{code.BASH_TEMPLATES.index(template)}"
    return f"code/{kind}", single(text, rng, words.CODE_SYSTEM_PROMPTS)


# ---------------------------------------------------------------- multi-turn
CODE_FOLLOW_UPS = [
    "Now add type hints and a docstring.", "Can you write tests for it?", "Convert it to {target}.",
    "What is its time complexity?", "How would you make it faster?", "Can you explain it line by line?",
    "Rewrite it without the loop.", "What happens with empty input?",
]
MATH_FOLLOW_UPS = [
    "Can you explain how you got that?", "Can you check the answer another way?", "What if the numbers were doubled?",
    "Write a similar problem for me to practise.", "Explain the first step in more detail.",
    "Is there a faster way to solve it?",
]
WRITING_FOLLOW_UPS = [
    "Make it even shorter.", "Now make it more formal.", "Can you turn it into bullet points?",
    "Write a headline for it too.", "Make it sound friendlier.", "Now translate it into French.",
]


def multiturn(rng: random.Random, families: list[Callable]) -> tuple[str, Record]:
    kind = rng.choices(["chat", "math", "code", "writing"], weights=[40, 25, 25, 10])[0]
    if kind == "chat":
        question, answer = rng.choice(words.CHAT_EXCHANGES)
        follow = rng.choice(words.FOLLOW_UPS)
    elif kind == "math":
        family = rng.choice(families)
        question, answer = family()
        follow = rng.choice(MATH_FOLLOW_UPS)
        kind = f"math/{family.__name__}"
    elif kind == "code":
        language, snippet, description, _ = corpus_snippets.compose(rng)
        while language == "SQL":  # the follow-ups ask for type hints, tests, ports: not for a query
            language, snippet, description, _ = corpus_snippets.compose(rng)
        question = rng.choice(code.WRITE_TEMPLATES).format(language=language, task=description)
        answer = f"Here is one way to do it:\n\n```{FENCES[language]}\n{snippet}\n```"
        target = rng.choice([t for t in code.CONVERT_TARGETS if t != language])
        follow = rng.choice(CODE_FOLLOW_UPS).format(target=target)
    else:
        passage_kind, passage = corpus_writing.passage(rng)
        question = rng.choice(["Summarise this text:", "Give me the gist of this:", "Summarise this for me."]) + "\n\n" + passage
        answer = "Here is a summary: " + " ".join(passage.split("\n")[:2])
        follow = rng.choice(WRITING_FOLLOW_UPS)
        kind = f"writing/{passage_kind}"
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer},
                {"role": "user", "content": follow}]
    if rng.random() < SYSTEM_SHARE:
        messages.insert(0, {"role": "system", "content": rng.choice(words.SYSTEM_PROMPTS)})
    return f"multiturn/{kind}", {"messages": messages}


# ---------------------------------------------------------------- assembly
def training_templates() -> list[str]:
    """Every prompt template of the training corpus, for the test that held-out prompts match none."""
    return (EXPLAIN + ADVICE + HOW_TO + COMPARE + CREATIVE + BRAINSTORM + DEBATE + FIX_WITH_INTENT
            + code.WRITE_TEMPLATES + code.EXPLAIN_TEMPLATES + code.CONVERT_TEMPLATES + code.FIX_TEMPLATES
            + code.TEST_TEMPLATES + code.CONCEPT_TEMPLATES + code.SQL_TEMPLATES + code.BASH_TEMPLATES
            + corpus_writing.FREE_WRITING + corpus_math.CONCEPTS)


def key(record: Record) -> str:
    sample = PromptSample(0, prompt=record.get("prompt"),
                          messages=tuple(record["messages"]) if "messages" in record else None,
                          images=tuple(Path(p) for p in record.get("images", [])))
    return prompt_key(sample)


def heldout_records() -> list[Record]:
    math = list(dict.fromkeys(heldout_prompts.math_prompts(SEED + 1, per_family=8)))
    records = [{"category": "chat", "prompt": t} for t in heldout_prompts.CHAT]
    records += [{"category": "code", "prompt": t} for t in heldout_prompts.CODE]
    records += [{"category": "math", "prompt": t} for t in math]
    seen: set[str] = set()
    by_category: dict[str, list[Record]] = {}
    for record in records:
        if key(record) not in seen:
            seen.add(key(record))
            by_category.setdefault(record["category"], []).append(record)
    return mix(by_category, "heldout-")  # mixed, so that the last N lines (what evaluation reads) cover all three


def training_records(rng: random.Random, forbidden: set[str]) -> tuple[list[Record], dict[str, int]]:
    """Per category, draw until COUNTS distinct keys; returns the mixed records and the template counts."""
    families = corpus_math.families(rng)
    makers = {"chat": lambda: chat(rng), "writing": lambda: writing(rng), "math": lambda: math_problem(rng, families),
              "code": lambda: code_task(rng), "multiturn": lambda: multiturn(rng, families)}
    seen = set(forbidden)
    by_category: dict[str, list[Record]] = {}
    templates: dict[str, int] = {}
    for category, count in COUNTS.items():
        out, attempts = [], 0
        while len(out) < count:
            attempts += 1
            if attempts > 20 * count:
                raise RuntimeError(f"{category}: only {len(out)} distinct prompts after {attempts} draws")
            template, record = makers[category]()
            k = key(record)
            if k in seen:
                continue
            seen.add(k)
            templates[template] = templates.get(template, 0) + 1
            out.append({"category": category, **record})
        by_category[category] = out
    return mix(by_category), templates


def mix(by_category: dict[str, list[Record]], id_prefix: str = "") -> list[Record]:
    """Interleave the categories so that every prefix holds each one in proportion (largest deficit first)."""
    total = sum(len(v) for v in by_category.values())
    taken = {c: 0 for c in by_category}
    out = []
    for i in range(1, total + 1):
        category = max(by_category, key=lambda c: len(by_category[c]) * i / total - taken[c])
        out.append(by_category[category][taken[category]])
        taken[category] += 1
    for i, record in enumerate(out):
        record["id"] = f"{id_prefix}{record['category']}-{i:05d}"
    return [{"id": r.pop("id"), **r} for r in out]


def interleave(text: list[Record], images: list[Record]) -> list[Record]:
    every = max(1, len(text) // max(1, len(images)))
    out, pending = [], list(images)
    for i, record in enumerate(text):
        out.append(record)
        if pending and i % every == every - 1:
            out.append(pending.pop(0))
    return out + pending


def write_jsonl(path: Path, records: list[Record]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def main(out: Path = HERE) -> dict[str, int]:
    start = time.perf_counter()
    rng = random.Random(SEED)
    heldout = heldout_records()
    corpus, templates = training_records(rng, {key(r) for r in heldout})
    vision_prompts.draw_new_images(out / "images")
    images = [{"id": f"image-{i:04d}", **r} for i, r in enumerate(vision_prompts.image_prompts(rng, VISION_IMAGES))]
    files = {"corpus.jsonl": corpus, "heldout.jsonl": heldout,
             "corpus_vision.jsonl": interleave(corpus[:VISION_TEXT], images)}
    for name, records in files.items():
        write_jsonl(out / name, records)
        counts: dict[str, int] = {}
        for record in records:
            counts[record["category"]] = counts.get(record["category"], 0) + 1
        size = (out / name).stat().st_size
        print(f"wrote {out / name}: {len(records)} prompts, {size / 1e6:.2f} MB, {counts}")
    print(f"{len(templates)} distinct templates; {time.perf_counter() - start:.1f} s")
    return templates


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
