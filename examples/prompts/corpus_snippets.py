"""Code snippets composed from patterns and domains, for "explain", "convert", "fix" and multi-turn code prompts.

A pattern is a small function shape (filter and sum, group by, arg-max, average, top-k, ...)
written once per language; a domain supplies the nouns (orders and amounts, songs and durations,
...). Each pattern has a description (for "write" questions whose answer is the snippet) and,
where one is natural, a buggy variant with the symptom a user would report.

    python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# (collection, item, numeric field, text field)
DOMAINS = [
    ("orders", "order", "amount", "customer"), ("students", "student", "grade", "name"),
    ("files", "file", "size", "path"), ("readings", "reading", "celsius", "station"),
    ("products", "product", "price", "category"), ("users", "user", "age", "email"),
    ("tasks", "task", "hours", "owner"), ("songs", "song", "duration", "artist"),
    ("books", "book", "pages", "author"), ("trips", "trip", "distance", "city"),
    ("invoices", "invoice", "total", "client"), ("runs", "run", "seconds", "runner"),
]


@dataclass(frozen=True)
class Pattern:
    language: str
    description: str  # completes "a function that ..."
    code: str
    bug: tuple[str, str, str] | None = None  # (text in code, buggy replacement, symptom)


PATTERNS = [
    Pattern("Python", "sums the {num} of every {item} whose {num} value is above a limit",
            "def total_{num}_over({coll}, limit):\n    total = 0\n    for {item} in {coll}:\n"
            "        if {item}[\"{num}\"] > limit:\n            total += {item}[\"{num}\"]\n    return total",
            ("total += ", "total = ", "it returns only the last matching {num}, not the sum")),
    Pattern("Python", "groups {coll} by {text}",
            "def {coll}_by_{text}({coll}):\n    groups = {{}}\n    for {item} in {coll}:\n"
            "        groups.setdefault({item}[\"{text}\"], []).append({item})\n    return groups",
            ("groups.setdefault({item}[\"{text}\"], []).append({item})", "groups[{item}[\"{text}\"]] = [{item}]",
             "each group ends up with only one {item}")),
    Pattern("Python", "returns the {item} with the largest {num}",
            "def largest_{item}({coll}):\n    best = None\n    for {item} in {coll}:\n"
            "        if best is None or {item}[\"{num}\"] > best[\"{num}\"]:\n            best = {item}\n    return best",
            ("best is None or {item}[\"{num}\"] > best[\"{num}\"]", "best is None or {item}[\"{num}\"] < best[\"{num}\"]",
             "it returns the {item} with the smallest {num}")),
    Pattern("Python", "computes the average {num} of a list of {coll}",
            "def average_{num}({coll}):\n    values = [{item}[\"{num}\"] for {item} in {coll}]\n"
            "    return sum(values) / len(values) if values else 0.0",
            ("sum(values) / len(values)", "sum(values) // len(values)", "the average is always a whole number")),
    Pattern("Python", "returns the k {coll} with the highest {num}",
            "def top_{coll}({coll}, k=3):\n    return sorted({coll}, key=lambda x: x[\"{num}\"], reverse=True)[:k]",
            (", reverse=True", "", "it returns the {coll} with the lowest {num} instead of the highest")),
    Pattern("Python", "counts the {coll} whose {text} starts with a prefix",
            "def count_{text}_prefix({coll}, prefix):\n"
            "    return sum(1 for {item} in {coll} if {item}[\"{text}\"].startswith(prefix))",
            (".startswith(prefix)", " == prefix", "it only counts exact matches, not prefixes")),
    Pattern("Python", "scales every {num} so that the largest becomes 1",
            "def scale_{num}({coll}):\n    top = max({item}[\"{num}\"] for {item} in {coll})\n"
            "    return [{item}[\"{num}\"] / top for {item} in {coll}]",
            None),
    Pattern("Python", "defines a {Item} record with a {text} and a {num}, and checks whether it is above a limit",
            "from dataclasses import dataclass\n\n@dataclass\nclass {Item}:\n    {text}: str\n    {num}: float\n\n"
            "    def above(self, limit: float) -> bool:\n        return self.{num} > limit",
            None),
    Pattern("Python", "reads {coll} from a CSV file with {text} and {num} columns",
            "import csv\n\ndef load_{coll}(path):\n    with open(path, newline=\"\") as f:\n"
            "        return [{{\"{text}\": row[\"{text}\"], \"{num}\": float(row[\"{num}\"])}} for row in csv.DictReader(f)]",
            ("float(row[\"{num}\"])", "row[\"{num}\"]", "sorting the loaded {coll} by {num} gives a strange order")),
    Pattern("Python", "removes {coll} with a duplicate {text}, keeping the first one",
            "def unique_{coll}({coll}):\n    seen = set()\n    out = []\n    for {item} in {coll}:\n"
            "        if {item}[\"{text}\"] not in seen:\n            seen.add({item}[\"{text}\"])\n            out.append({item})\n"
            "    return out",
            ("            seen.add({item}[\"{text}\"])\n", "", "duplicates are not removed")),
    Pattern("JavaScript", "sums the {num} of every {item} whose {num} value is above a limit",
            "function total{Num}Over({coll}, limit) {{\n  let total = 0;\n  for (const {item} of {coll}) {{\n"
            "    if ({item}.{num} > limit) total += {item}.{num};\n  }}\n  return total;\n}}",
            ("const {item} of", "const {item} in", "it always returns 0")),
    Pattern("JavaScript", "groups {coll} by {text}",
            "function group{Coll}By{Text}({coll}) {{\n  const groups = {{}};\n  for (const {item} of {coll}) {{\n"
            "    (groups[{item}.{text}] ??= []).push({item});\n  }}\n  return groups;\n}}",
            None),
    Pattern("JavaScript", "returns the k {coll} with the highest {num} without changing the input",
            "const top{Coll} = ({coll}, k = 3) =>\n  [...{coll}].sort((a, b) => b.{num} - a.{num}).slice(0, k);",
            ("[...{coll}].sort", "{coll}.sort", "the original array is reordered after calling it")),
    Pattern("JavaScript", "computes the average {num} of a list of {coll}",
            "function average{Num}({coll}) {{\n  if ({coll}.length === 0) return 0;\n"
            "  return {coll}.reduce((sum, {item}) => sum + {item}.{num}, 0) / {coll}.length;\n}}",
            (", 0) /", ") /", "it returns NaN or a wrong value for some inputs")),
    Pattern("Go", "sums the {num} of every {item} whose {num} value is above a limit",
            "func Total{Num}Over({coll} []{Item}, limit float64) float64 {{\n\ttotal := 0.0\n"
            "\tfor _, {item} := range {coll} {{\n\t\tif {item}.{Num} > limit {{\n\t\t\ttotal += {item}.{Num}\n\t\t}}\n\t}}\n"
            "\treturn total\n}}",
            None),
    Pattern("Rust", "sums the {num} of every {item} whose {num} value is above a limit",
            "fn total_{num}_over({coll}: &[{Item}], limit: f64) -> f64 {{\n"
            "    {coll}.iter().filter(|x| x.{num} > limit).map(|x| x.{num}).sum()\n}}",
            None),
    Pattern("Java", "returns the {item} with the largest {num}",
            "static Optional<{Item}> largest{Item}(List<{Item}> {coll}) {{\n"
            "    return {coll}.stream().max(Comparator.comparingDouble({Item}::get{Num}));\n}}",
            None),
    Pattern("C", "computes the average {num} of an array of {coll}",
            "double average_{num}(const struct {item} *{coll}, size_t n) {{\n    double sum = 0;\n"
            "    for (size_t i = 0; i < n; i++) sum += {coll}[i].{num};\n    return n ? sum / n : 0.0;\n}}",
            ("i < n;", "i <= n;", "it sometimes returns garbage or crashes")),
    Pattern("SQL", "returns the total {num} per {text}, largest first",
            "SELECT {text}, SUM({num}) AS total_{num}\nFROM {coll}\nGROUP BY {text}\nORDER BY total_{num} DESC;",
            ("GROUP BY {text}\n", "", "the database rejects the query")),
]


def _camel(word: str) -> str:
    return word[0].upper() + word[1:]


def compose(rng: random.Random, buggy: bool = False) -> tuple[str, str, str, str | None]:
    """(language, code, description, symptom); with ``buggy`` a pattern with a bug, code carrying it."""
    pattern = rng.choice([p for p in PATTERNS if p.bug] if buggy else PATTERNS)
    coll, item, num, text = rng.choice(DOMAINS)
    slots = dict(coll=coll, item=item, num=num, text=text, Coll=_camel(coll), Item=_camel(item), Num=_camel(num),
                 Text=_camel(text))
    code = pattern.code.format(**slots)
    description = pattern.description.format(**slots)
    if not buggy:
        return pattern.language, code, description, None
    good, bad, symptom = (part.format(**slots) for part in pattern.bug)
    assert good in code, (pattern.description, good)
    return pattern.language, code.replace(good, bad, 1), description, symptom
