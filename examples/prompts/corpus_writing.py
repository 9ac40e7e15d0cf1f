"""Writing prompts for the training corpus: passages composed here, and tasks over them.

A passage is a few sentences drawn from one of several kinds (meeting notes, an email, a product
announcement, a travel diary, a study summary, a complaint, local news, a story opening, a small
business report), with names, places and numbers filled in by the seeded RNG. Tasks ask to
summarise, rewrite, shorten, reply to or extract from the passage. Free-writing tasks need no
passage.

    python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import random

from corpus_words import AUDIENCES, COMPANIES, MONTHS, NAMES, PRODUCTS, PROJECTS, TONES, TOWNS, WEEKDAYS

KINDS = {
    "meeting": [
        "On {weekday}, the {team} team met to discuss {project}.",
        "{a} reported that the work is about {pct}% done and that the main risk is {risk}.",
        "{b} asked whether the deadline of {month} {day} is still realistic.",
        "The group agreed to move the review meeting to next {weekday}.",
        "{a} will send a revised plan by the end of the week, and {b} will contact the supplier.",
        "Several people said the budget of ${money} would not cover {risk}.",
        "It was decided to hire one temporary assistant for {n} weeks.",
        "The next meeting will start with a short demo from {b}.",
        "Nobody volunteered to update the shared calendar, so {a} will do it for now.",
    ],
    "email": [
        "Hi {b},", "I hope your week is going well.",
        "I'm writing about {project}, which we discussed briefly on {weekday}.",
        "Could you send me the latest figures before {month} {day}?",
        "I noticed that the invoice for ${money} has not been paid yet, and I wanted to check whether something is missing.",
        "If it helps, I am free for a call on {weekday} afternoon.",
        "Also, the office will be closed for {n} days next month because of {risk}.",
        "Thanks again for your help with the last report; it made a real difference.",
        "Best wishes, {a}",
    ],
    "product": [
        "{company} today announced {product}, available from {month} {day}.",
        "It costs ${money} and comes in {n} colours.",
        "According to the company, it was designed after hearing that customers struggled with {risk}.",
        "Early testers in {town} praised how light it is but said the instructions were confusing.",
        "The company promises free repairs for {n} years.",
        "A spokesperson, {a}, said the goal was to make everyday life a little simpler.",
        "Pre-orders opened this morning and the first batch is reportedly almost sold out.",
        "Critics point out that a similar product launched last year for less money.",
    ],
    "travel": [
        "Day {n}: we arrived in {town} just after sunrise.",
        "The train was {pct} minutes late, so we missed the guided tour.",
        "{a} insisted on finding the old market, which turned out to be the highlight of the trip.",
        "We ate fish soup in a tiny restaurant near the harbour and paid only ${n}{m}.50 for four people.",
        "In the afternoon it rained heavily, and we hid in a museum about {topic}.",
        "The hostel owner told us about a hiking trail that starts behind the church.",
        "By evening my feet hurt, but the view from the hill was worth every step.",
        "Tomorrow we plan to take the early ferry, weather permitting.",
    ],
    "study": [
        "Researchers at the University of {town} studied {n}00 volunteers over {pct} months.",
        "They wanted to know whether {habit} improves concentration at work.",
        "Participants were split into two groups; only one group changed its routine.",
        "After the study period, the first group scored about {pct}% higher on attention tests.",
        "The authors caution that the sample was small and mostly made up of office workers.",
        "They also note that people knew which group they were in, which may have affected the results.",
        "A follow-up study with {n} hospitals is planned for next year.",
        "The lead author, Dr {a}, said the effect was 'modest but consistent'.",
    ],
    "complaint": [
        "Dear {company} customer service,",
        "On {month} {day} I ordered {product}, order number {money}{n}.",
        "It arrived {n} days late, and the box was damaged.",
        "When I opened it, one part was missing and the manual was in a language I cannot read.",
        "I called your helpline twice and waited over {pct} minutes each time.",
        "I would like either a replacement or a full refund of ${money}.",
        "I have been a loyal customer for years and am disappointed by this experience.",
        "Please reply within two weeks. Sincerely, {a}",
    ],
    "news": [
        "The {town} town council voted on {weekday} to {decision}.",
        "The plan, which will cost about ${big}, was approved by {n} votes to {m}.",
        "Supporters say it will reduce traffic and make the centre safer for children.",
        "Local shop owners, including {a}, worry that fewer customers will visit during the works.",
        "Construction is expected to start in {month} and to last about {pct} weeks.",
        "A public meeting to answer residents' questions will be held at the library.",
        "The council also discussed {risk}, but postponed a decision.",
    ],
    "story": [
        "{a} had never trusted the old lift in the building on {street} Street.",
        "That evening, it stopped between the fourth and fifth floors with a soft, tired sigh.",
        "Inside, besides {a}, stood a stranger holding a cage with a very calm owl.",
        "'It happens every {weekday},' the stranger said, as if that explained anything.",
        "The lights flickered, and somewhere above them a piano began to play.",
        "{a} pressed the alarm button, which answered with a polite recorded laugh.",
        "After {n} minutes, the lift moved again, but it went down instead of up.",
        "When the doors opened, the lobby was full of snow.",
    ],
    "report": [
        "{company} had a mixed {quarter}.",
        "Revenue rose {pct}% to ${big}, mainly thanks to online sales.",
        "Costs grew faster, because of higher rent in {town} and {n} new hires.",
        "The best-selling item was {product}, while the older range sold poorly.",
        "Customer complaints fell by a third after the new returns policy.",
        "The owner, {a}, plans to open a second shop if the next quarter is as strong.",
        "Cash reserves are enough to cover about {n} months of expenses.",
    ],
}
LETTERS = ("email", "complaint")
RISKS = ["supply delays", "staff illness", "rising energy costs", "a software outage", "roadworks", "bad weather",
         "a shortage of volunteers", "unclear requirements", "a broken delivery van", "new regulations"]
HABITS = ["a short walk after lunch", "working in 50-minute blocks", "drinking more water", "turning off notifications",
          "standing desks", "listening to quiet music", "a ten-minute morning stretch", "writing a daily to-do list"]
DECISIONS = ["close the high street to cars on weekends", "build a new cycle path to the station",
             "turn the old cinema into a community centre", "plant 500 trees along the river",
             "extend the opening hours of the public pool", "introduce a weekly farmers' market"]
TEAMS = ["design", "marketing", "engineering", "finance", "operations", "events", "support"]
STREETS = ["Mill", "Elm", "Harbour", "Station", "Chapel", "Queen", "Orchard"]
QUARTERS = ["first quarter", "second quarter", "third quarter", "fourth quarter", "year"]

# Tasks over a passage; {text} is replaced by the passage, which is placed before or after the instruction.
PASSAGE_TASKS = [
    "Summarise this in {k} sentences.", "Summarise the text below for {audience}.",
    "Write a one-sentence summary of this text.", "Turn this into a bulleted list of the key facts.",
    "Write a headline for this text.", "Rewrite this in a more {tone} tone.", "Rewrite this for {audience}.",
    "Shorten this to under {n} words without losing the main points.", "Rewrite this in plain English.",
    "Extract every name, date and amount of money from this text as a JSON object.",
    "List the action items in this text, with who is responsible where stated.",
    "What is the tone of this text? Quote two phrases that show it.", "Rewrite this in the third person.",
    "Write three questions a reader might ask after reading this.", "Suggest a better structure for this text.",
    "Rewrite this as a short social media post under 280 characters.", "Translate this into simple, clear Spanish.",
    "Rewrite this text in the past tense.", "Give constructive feedback on the writing below.",
    "Expand this into a longer piece of about {n} words, keeping the facts unchanged.",
    "What information is missing from this text that a reader would want?",
    "Write a reply to this text in a {tone} tone.", "Rewrite this as a dialogue between two people.",
    "Identify any claims in this text that would need a source.", "Give this text a title and a one-line subtitle.",
]
KIND_TASKS = {
    "email": ["Write a polite reply to this email, agreeing to a call.", "Make this email more concise."],
    "complaint": ["Write a reply from the company apologising and offering a solution.",
                  "Rate how reasonable this complaint is and explain why."],
    "meeting": ["Turn these notes into a short follow-up email to the team.", "Write minutes from these notes."],
    "story": ["Continue this story for one more paragraph.", "Rewrite this opening from the owl's point of view."],
    "study": ["Explain the limitations of this study in simple terms.", "Write a sceptical newspaper comment on this."],
    "product": ["Write a customer review of this product, based only on the announcement.",
                "Rewrite this announcement as an advert."],
}
LAYOUTS = ["{task}\n\n{text}", "{task}\n\n\"\"\"\n{text}\n\"\"\"", "{text}\n\n{task}", "Text:\n{text}\n\nTask: {task}"]

# Free writing: no passage.
FREE_WRITING = [
    "Write a cover letter for a {job} position. Keep it under {n} words.",
    "Write a product description for {product}.", "Write a {tone} toast for a friend's {event}.",
    "Write an apology email to a customer whose order of {product} arrived late.",
    "Write a short speech for {event}, in a {tone} tone.", "Write an announcement for {event} at {company}.",
    "Write a job advert for a {job} at {company}.", "Write a short bio for a {job} named {a} for a conference website.",
    "Write a letter to the {town} council asking for {decision_short}.",
    "Write a {tone} newsletter introduction for {month} for the members of a {club}.",
    "Draft a text message inviting friends to {event}.", "Write instructions for using {product}, in five steps.",
    "Write an out-of-office reply for a {job} who is away for {n} days.",
    "Write a short review of a fictional restaurant in {town}.", "Write a LinkedIn post announcing that {a} joined {company} as a {job}.",
]
JOBS = ["junior data analyst", "barista", "museum guide", "software tester", "primary school teacher", "nurse",
        "graphic designer", "warehouse supervisor", "librarian", "project manager", "bicycle mechanic", "chef"]
EVENTS = ["a retirement party", "a wedding", "a company anniversary", "a graduation", "a charity run",
          "a book launch", "a neighbourhood clean-up day", "a school reunion", "an office move", "a 50th birthday"]
CLUBS = ["running club", "chess club", "gardening society", "photography group", "choir", "hiking club"]


def passage(rng: random.Random) -> tuple[str, str]:
    """(kind, text): four to seven sentences of one kind, in their order, with slots filled."""
    kind = rng.choice(sorted(KINDS))
    sentences = KINDS[kind]
    k = rng.randint(min(4, len(sentences)), min(7, len(sentences)))
    chosen = sorted(rng.sample(range(len(sentences)), k))
    if kind in LETTERS:  # a letter keeps its greeting and its signature
        chosen = sorted({0, len(sentences) - 1, *chosen[: k - 2]})
    a, b = rng.sample(NAMES, 2)
    slots = dict(a=a, b=b, weekday=rng.choice(WEEKDAYS), month=rng.choice(MONTHS), day=rng.randint(1, 28),
                 team=rng.choice(TEAMS), project=rng.choice(PROJECTS), pct=rng.randint(5, 60), risk=rng.choice(RISKS),
                 money=rng.randint(12, 980), n=rng.randint(2, 9), m=rng.randint(0, 4), company=rng.choice(COMPANIES),
                 product=rng.choice(PRODUCTS), town=rng.choice(TOWNS), topic=rng.choice(["salt", "clocks", "boats", "lace"]),
                 habit=rng.choice(HABITS), decision=rng.choice(DECISIONS), street=rng.choice(STREETS),
                 quarter=rng.choice(QUARTERS), big=f"{rng.randint(12, 980) * 1000:,}")
    lines = [sentences[i].format(**slots) for i in chosen]
    sep = "\n" if kind in LETTERS else " "
    return kind, sep.join(lines)


def passage_task(rng: random.Random) -> tuple[str, str, str]:
    """(prompt, kind, passage) for a task over a composed passage."""
    kind, text = passage(rng)
    tasks = PASSAGE_TASKS + KIND_TASKS.get(kind, []) * 3
    task = rng.choice(tasks).format(k=rng.randint(1, 4), audience=rng.choice(AUDIENCES), tone=rng.choice(TONES),
                                    n=rng.choice([40, 60, 80, 120, 200, 300]))
    return rng.choice(LAYOUTS).format(task=task, text=text), kind, text


def free_writing(rng: random.Random) -> str:
    return rng.choice(FREE_WRITING).format(
        job=rng.choice(JOBS), n=rng.choice([150, 200, 250, 300]), product=rng.choice(PRODUCTS), tone=rng.choice(TONES),
        event=rng.choice(EVENTS), company=rng.choice(COMPANIES), a=rng.choice(NAMES), town=rng.choice(TOWNS),
        decision_short=rng.choice(["a new bench in the park", "better street lighting", "a pedestrian crossing",
                                   "longer library hours", "more recycling bins"]),
        month=rng.choice(MONTHS), club=rng.choice(CLUBS))
