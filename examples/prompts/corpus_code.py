"""Code tasks, snippets and bugs for the code part of the training corpus (data only, no logic).

Everything here was written for minispark; none of it comes from a public benchmark. Tasks used by
the held-out split live in heldout_prompts.py and must not be added here.

    python examples/prompts/make_training_corpus.py
"""

# "Write a {language} function that {task}."
TASKS = [
    "reverses the words in a sentence", "checks whether a string is a palindrome, ignoring punctuation and case",
    "returns the n-th Fibonacci number iteratively", "merges two sorted lists into one sorted list",
    "counts how often each word appears in a text", "finds the longest common prefix of a list of strings",
    "implements binary search on a sorted array", "removes duplicate items from a list while keeping their order",
    "converts a Roman numeral to an integer", "converts an integer to a Roman numeral",
    "validates that brackets in an expression are balanced", "computes the greatest common divisor of two integers",
    "flattens a nested list of arbitrary depth", "rotates a square matrix by 90 degrees clockwise",
    "returns all prime numbers below n using the sieve of Eratosthenes", "groups a list of words into anagram groups",
    "parses a CSV line that may contain quoted fields with commas", "computes the edit distance between two strings",
    "checks whether a binary tree is a valid binary search tree", "finds two numbers in an array that add up to a target",
    "transposes a matrix given as a list of rows", "chunks a list into pieces of size n",
    "computes a running average over a stream of numbers", "capitalises the first letter of every word",
    "checks whether two strings are anagrams", "finds the most frequent element in a list",
    "converts a temperature between Celsius and Fahrenheit", "formats a number of seconds as HH:MM:SS",
    "parses a duration like '1h30m' into seconds", "validates an email address with simple rules",
    "counts the vowels in a string", "computes the factorial of n without recursion",
    "returns the digits of an integer in reverse order", "checks whether a year is a leap year",
    "finds the second largest number in a list", "computes the dot product of two vectors",
    "multiplies two matrices", "computes the median of a list of numbers", "implements run-length encoding",
    "decodes a run-length encoded string", "shuffles a list with the Fisher-Yates algorithm",
    "implements a stack with push, pop and peek", "implements a queue using two stacks",
    "implements a fixed-size ring buffer", "implements a least-recently-used cache", "implements a min-heap",
    "performs a breadth-first search on a graph given as an adjacency list",
    "performs a depth-first search and returns the visit order", "detects a cycle in a directed graph",
    "computes shortest paths with Dijkstra's algorithm", "performs a topological sort of tasks with dependencies",
    "implements quicksort", "implements merge sort", "implements insertion sort and counts the swaps",
    "finds the kth smallest element of an unsorted list", "computes the power set of a small list",
    "generates all permutations of a string", "solves the N-queens problem for small n",
    "checks whether a Sudoku grid is valid", "counts islands in a grid of 0s and 1s",
    "computes the longest increasing subsequence", "computes the maximum subarray sum",
    "computes the number of ways to climb n stairs taking 1 or 2 steps", "converts a number to a given base",
    "parses a query string into a dictionary", "builds a URL from a base and query parameters",
    "wraps text to a given line width", "pads a string to a fixed width, centred", "truncates text with an ellipsis",
    "slugifies a title for use in a URL", "masks all but the last four digits of a card number",
    "checks a number with the Luhn algorithm", "generates a random password of a given length",
    "counts lines, words and characters in a file", "reads a file and prints its last n lines",
    "finds all files with a given extension in a directory tree", "merges overlapping intervals",
    "checks whether two intervals overlap", "computes the area of a polygon from its vertices",
    "computes the distance between two latitude/longitude points", "rounds a number to n significant figures",
    "formats a number with thousands separators", "converts a snake_case string to camelCase",
    "converts camelCase to snake_case", "finds the first non-repeating character in a string",
    "compresses consecutive whitespace to single spaces", "checks whether a number is a power of two",
    "counts the set bits in an integer", "swaps two variables without a temporary", "implements a trie with insert and search",
    "implements a simple tokenizer for arithmetic expressions", "evaluates an expression in reverse Polish notation",
    "implements a rate limiter with a token bucket", "retries a function call with exponential backoff",
    "memoizes an expensive pure function", "debounces a function", "throttles a function",
    "deep-merges two nested dictionaries", "diffs two lists and reports added and removed items",
    "computes a histogram of values into n bins", "normalises a list of numbers to the range 0 to 1",
    "computes a moving average with window k", "finds the longest palindromic substring",
    "checks whether a linked list has a cycle", "reverses a singly linked list", "finds the middle of a linked list",
    "serialises a binary tree to a string and back", "computes the height of a binary tree",
    "returns the level-order traversal of a binary tree", "computes the lowest common ancestor in a binary search tree",
]

LANGUAGES = ["Python"] * 8 + ["JavaScript"] * 2 + ["TypeScript", "C", "C++", "Rust", "Go", "Java"]

WRITE_TEMPLATES = [
    "Write a {language} function that {task}.",
    "Write a {language} function that {task}. Include a short example of how to call it.",
    "In {language}, implement a function that {task}.",
    "Can you show me {language} code that {task}?",
    "I need a {language} function that {task}. Please explain how it works.",
    "Implement, in idiomatic {language}, a function that {task}, and state its time complexity.",
    "Write {language} code that {task}. Handle edge cases such as empty input.",
    "Give me a clean, well-commented {language} implementation of a function that {task}.",
    "Write a {language} function that {task}, then show two test cases.",
    "How would you write a function in {language} that {task}? Keep it short.",
    "Write a function that {task}. Use {language}.",
    "Write a {language} function that {task} without using any external libraries.",
]

PY_EXTRAS = [
    "Use type hints.", "Add a docstring.", "Make it a generator if that helps.", "Use only the standard library.",
    "Write it as a class with a clear interface.", "Add doctest examples.", "Keep it under 20 lines.",
    "Prefer readability over cleverness.",
]

# (language, code) pairs used for "explain this", "review this" and "convert this".
SNIPPETS = [
    ("Python", "def f(xs):\n    out = []\n    for i in range(len(xs)):\n        if xs[i] % 2 == 0:\n            out.append(xs[i] * xs[i])\n    return out"),
    ("Python", "from collections import Counter\n\ndef top_words(text, k=3):\n    words = text.lower().split()\n    return [w for w, _ in Counter(words).most_common(k)]"),
    ("Python", "def chunks(seq, n):\n    for i in range(0, len(seq), n):\n        yield seq[i:i + n]"),
    ("Python", "import functools\n\n@functools.lru_cache(maxsize=None)\ndef ways(n):\n    if n < 2:\n        return 1\n    return ways(n - 1) + ways(n - 2)"),
    ("Python", "def merge(a, b):\n    i = j = 0\n    out = []\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]"),
    ("Python", "class Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, x):\n        self._items.append(x)\n\n    def pop(self):\n        return self._items.pop()\n\n    def __len__(self):\n        return len(self._items)"),
    ("Python", "with open('data.txt') as f:\n    totals = {}\n    for line in f:\n        name, value = line.split(',')\n        totals[name] = totals.get(name, 0) + float(value)\nprint(sorted(totals.items(), key=lambda kv: -kv[1])[:5])"),
    ("Python", "def is_prime(n):\n    if n < 2:\n        return False\n    d = 2\n    while d * d <= n:\n        if n % d == 0:\n            return False\n        d += 1\n    return True"),
    ("Python", "squares = {x: x * x for x in range(10) if x % 3}\nprint(sum(squares.values()))"),
    ("Python", "from dataclasses import dataclass, field\n\n@dataclass\nclass Order:\n    items: list[str] = field(default_factory=list)\n    paid: bool = False\n\n    def total(self, prices):\n        return sum(prices[i] for i in self.items)"),
    ("Python", "import re\n\ndef extract_dates(text):\n    return re.findall(r'\\b(\\d{4})-(\\d{2})-(\\d{2})\\b', text)"),
    ("Python", "def bsearch(xs, target):\n    lo, hi = 0, len(xs)\n    while lo < hi:\n        mid = (lo + hi) // 2\n        if xs[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid\n    return lo"),
    ("Python", "import itertools\n\npairs = list(itertools.combinations('abcd', 2))\nprint(len(pairs), pairs[:3])"),
    ("Python", "def retry(times):\n    def deco(fn):\n        def wrapper(*args, **kwargs):\n            for attempt in range(times):\n                try:\n                    return fn(*args, **kwargs)\n                except Exception:\n                    if attempt == times - 1:\n                        raise\n        return wrapper\n    return deco"),
    ("Python", "async def fetch_all(session, urls):\n    tasks = [session.get(u) for u in urls]\n    return await asyncio.gather(*tasks)"),
    ("JavaScript", "const counts = {};\nfor (const word of text.split(/\\s+/)) {\n  counts[word] = (counts[word] || 0) + 1;\n}\nconsole.log(Object.entries(counts).sort((a, b) => b[1] - a[1]).slice(0, 3));"),
    ("JavaScript", "function debounce(fn, ms) {\n  let timer;\n  return (...args) => {\n    clearTimeout(timer);\n    timer = setTimeout(() => fn(...args), ms);\n  };\n}"),
    ("JavaScript", "const total = orders\n  .filter(o => o.status === 'paid')\n  .map(o => o.amount)\n  .reduce((a, b) => a + b, 0);"),
    ("C", "int count_bits(unsigned int x) {\n    int n = 0;\n    while (x) {\n        x &= x - 1;\n        n++;\n    }\n    return n;\n}"),
    ("C", "void reverse(char *s) {\n    size_t n = strlen(s);\n    for (size_t i = 0; i < n / 2; i++) {\n        char t = s[i];\n        s[i] = s[n - 1 - i];\n        s[n - 1 - i] = t;\n    }\n}"),
    ("C++", "std::vector<int> v{5, 3, 8, 1};\nstd::sort(v.begin(), v.end(), std::greater<int>());\nfor (int x : v) std::cout << x << ' ';"),
    ("C++", "template <typename T>\nT clamp_value(T x, T lo, T hi) {\n    return std::max(lo, std::min(x, hi));\n}"),
    ("Rust", "fn word_lengths(s: &str) -> Vec<usize> {\n    s.split_whitespace().map(|w| w.len()).collect()\n}"),
    ("Rust", "fn largest<T: PartialOrd + Copy>(xs: &[T]) -> Option<T> {\n    let mut it = xs.iter();\n    let mut best = *it.next()?;\n    for &x in it {\n        if x > best { best = x; }\n    }\n    Some(best)\n}"),
    ("Go", "func sum(nums ...int) int {\n\ttotal := 0\n\tfor _, n := range nums {\n\t\ttotal += n\n\t}\n\treturn total\n}"),
    ("Go", "results := make(chan int)\nfor i := 0; i < 3; i++ {\n\tgo func(n int) { results <- n * n }(i)\n}\nfor i := 0; i < 3; i++ {\n\tfmt.Println(<-results)\n}"),
    ("Java", "public static Map<Character, Integer> letterCounts(String s) {\n    Map<Character, Integer> m = new HashMap<>();\n    for (char c : s.toCharArray()) {\n        if (Character.isLetter(c)) m.merge(c, 1, Integer::sum);\n    }\n    return m;\n}"),
    ("SQL", "SELECT c.name, COUNT(o.id) AS orders\nFROM customers c\nLEFT JOIN orders o ON o.customer_id = c.id\nGROUP BY c.name\nHAVING COUNT(o.id) > 2\nORDER BY orders DESC;"),
    ("SQL", "SELECT department, AVG(salary) AS avg_salary\nFROM employees\nWHERE hired_on >= '2020-01-01'\nGROUP BY department;"),
    ("Bash", "for f in *.log; do\n  gzip -9 \"$f\"\ndone"),
    ("Bash", "find . -name '*.py' -print0 | xargs -0 wc -l | sort -n | tail -5"),
    ("Bash", "grep -rn 'TODO' src/ | cut -d: -f1 | sort | uniq -c | sort -rn"),
]

EXPLAIN_TEMPLATES = [
    "Explain what this {language} code does:\n\n```{fence}\n{code}\n```",
    "What does the following {language} snippet do, step by step?\n\n```{fence}\n{code}\n```",
    "Explain this code to a beginner:\n\n```{fence}\n{code}\n```",
    "Review this {language} code and suggest improvements:\n\n```{fence}\n{code}\n```",
    "What is the time complexity of this code, and why?\n\n```{fence}\n{code}\n```",
    "Add comments to this {language} code explaining each part:\n\n```{fence}\n{code}\n```",
    "```{fence}\n{code}\n```\n\nWhat would you rename in this code to make it clearer?",
    "Are there any edge cases this {language} code gets wrong?\n\n```{fence}\n{code}\n```",
    "Rewrite this {language} code to be more idiomatic:\n\n```{fence}\n{code}\n```",
    "```{fence}\n{code}\n```\n\nSummarise what this does in one sentence, then in detail.",
]

CONVERT_TEMPLATES = [
    "Convert this {language} code to {target}:\n\n```{fence}\n{code}\n```",
    "Translate the following {language} into idiomatic {target}:\n\n```{fence}\n{code}\n```",
    "How would this look in {target}?\n\n```{fence}\n{code}\n```",
    "Port this snippet from {language} to {target} and point out any differences in behaviour:\n\n```{fence}\n{code}\n```",
]
CONVERT_TARGETS = ["Python", "JavaScript", "TypeScript", "C", "C++", "Rust", "Go", "Java"]

# (language, buggy code, symptom)
BUGS = [
    ("Python", "def average(xs):\n    return sum(xs) / len(xs)\n\nprint(average([]))", "it crashes on an empty list"),
    ("Python", "def add_item(item, items=[]):\n    items.append(item)\n    return items", "items from earlier calls show up in later calls"),
    ("Python", "def count_down(n):\n    while n > 0:\n        print(n)\n    print('done')", "it never finishes"),
    ("Python", "def last(xs):\n    return xs[len(xs)]", "it raises IndexError"),
    ("Python", "total = 0\nfor price in ['3.50', '2.25', '4.00']:\n    total += price\nprint(total)", "it raises a TypeError"),
    ("Python", "def is_even(n):\n    if n % 2 == 1:\n        return True\n    return False", "it returns the wrong answer for every input"),
    ("Python", "names = ['ann', 'bob', 'cy']\nfor i in range(1, len(names)):\n    print(names[i].title())", "the first name is never printed"),
    ("Python", "def remove_negatives(xs):\n    for x in xs:\n        if x < 0:\n            xs.remove(x)\n    return xs\n\nprint(remove_negatives([-1, -2, 3]))", "some negative numbers are left in the list"),
    ("Python", "import json\n\ndef load(path):\n    f = open(path)\n    return json.load(f)", "it leaks file handles in a long-running program"),
    ("Python", "def fib(n):\n    if n <= 1:\n        return n\n    return fib(n - 1) + fib(n - 1)", "the results are wrong"),
    ("Python", "x = 0.1 + 0.2\nif x == 0.3:\n    print('equal')\nelse:\n    print('not equal')", "it prints 'not equal'"),
    ("Python", "class Counter:\n    count = []\n\n    def add(self, x):\n        self.count.append(x)", "all instances share the same list"),
    ("Python", "def read_numbers(text):\n    return [int(x) for x in text.split(',')]\n\nprint(read_numbers('1, 2, ,3'))", "it crashes on input with an empty field"),
    ("Python", "def safe_div(a, b):\n    try:\n        return a / b\n    except:\n        return 0", "it hides unrelated errors such as passing a string"),
    ("JavaScript", "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 0);\n}", "it prints 3 three times"),
    ("JavaScript", "const nums = [10, 1, 5];\nnums.sort();\nconsole.log(nums);", "the numbers are not sorted numerically"),
    ("JavaScript", "async function load() {\n  const data = fetch('/api/items').json();\n  return data;\n}", "it throws 'json is not a function'"),
    ("JavaScript", "if (user.age = 18) {\n  console.log('just an adult');\n}", "every user is reported as 18"),
    ("C", "int sum(int *a, int n) {\n    int s;\n    for (int i = 0; i <= n; i++) s += a[i];\n    return s;\n}", "it returns garbage values"),
    ("C", "char *greet(const char *name) {\n    char buf[64];\n    sprintf(buf, \"Hello, %s\", name);\n    return buf;\n}", "the returned greeting is corrupted"),
    ("C++", "std::vector<int> v{1, 2, 3, 4};\nfor (auto it = v.begin(); it != v.end(); ++it) {\n    if (*it % 2 == 0) v.erase(it);\n}", "it crashes or skips elements"),
    ("Rust", "fn main() {\n    let s = String::from(\"hi\");\n    let t = s;\n    println!(\"{} {}\", s, t);\n}", "it does not compile"),
    ("Go", "func main() {\n\tvar m map[string]int\n\tm[\"a\"] = 1\n\tfmt.Println(m)\n}", "it panics at runtime"),
    ("Java", "String a = new String(\"hi\");\nString b = new String(\"hi\");\nif (a == b) System.out.println(\"same\");", "it never prints 'same'"),
    ("SQL", "SELECT name, COUNT(*)\nFROM orders\nGROUP BY customer_id;", "the database rejects the query"),
    ("SQL", "SELECT * FROM users WHERE email = NULL;", "it returns no rows even though some emails are missing"),
    ("Bash", "for f in $(ls *.txt); do\n  mv $f backup/$f\ndone", "it breaks on file names with spaces"),
    ("Bash", "if [ $count > 10 ]; then\n  echo big\nfi", "it creates a file called 10 and the comparison is wrong"),
]

FIX_TEMPLATES = [
    "This {language} code has a bug: {symptom}. Find it and fix it.\n\n```{fence}\n{code}\n```",
    "Why does this happen? {Symptom}.\n\n```{fence}\n{code}\n```",
    "Debug this for me ({symptom}):\n\n```{fence}\n{code}\n```",
    "```{fence}\n{code}\n```\n\nMy colleague says {symptom}. What is wrong and how should it be written?",
    "Fix the bug in this {language} snippet and explain the cause in two sentences. Symptom: {symptom}.\n\n```{fence}\n{code}\n```",
]

# (signature, behaviour) for "write tests" prompts.
TEST_TARGETS = [
    ("slugify(title: str) -> str", "lowercases, replaces spaces with hyphens and drops punctuation"),
    ("parse_duration(text: str) -> int", "turns strings like '2h15m' into seconds and rejects bad input"),
    ("merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]", "merges overlapping intervals"),
    ("is_valid_isbn10(code: str) -> bool", "checks the ISBN-10 check digit"),
    ("word_count(text: str) -> dict[str, int]", "counts words case-insensitively"),
    ("clamp(x: float, lo: float, hi: float) -> float", "limits x to the range [lo, hi]"),
    ("chunk(xs: list, n: int) -> list[list]", "splits a list into chunks of size n"),
    ("roman_to_int(s: str) -> int", "converts Roman numerals to integers"),
    ("median(xs: list[float]) -> float", "returns the median and raises on an empty list"),
    ("normalize_phone(s: str) -> str", "strips spaces and dashes and keeps a leading plus"),
    ("LRUCache(capacity).get/put", "evicts the least recently used key"),
    ("BankAccount.withdraw(amount)", "refuses overdrafts and negative amounts"),
    ("format_bytes(n: int) -> str", "prints sizes like '1.5 KB' and '3.0 MB'"),
    ("next_business_day(d: date) -> date", "skips Saturdays and Sundays"),
    ("parse_csv_line(line: str) -> list[str]", "handles quoted fields containing commas"),
    ("rate_limiter.allow(now: float) -> bool", "allows at most five calls per second"),
]
TEST_FRAMEWORKS = ["pytest", "pytest", "unittest", "Jest", "JUnit", "Go's testing package", "Rust's built-in test framework"]
TEST_TEMPLATES = [
    "Write unit tests with {framework} for a function `{signature}` that {behaviour}.",
    "I have `{signature}`, which {behaviour}. What test cases should I write? Then write them using {framework}.",
    "Write thorough {framework} tests, including edge cases, for `{signature}` ({behaviour}).",
]

CONCEPTS = [
    "recursion", "closures", "generators", "decorators", "async/await", "the event loop", "garbage collection",
    "pointers", "references vs values", "immutability", "pure functions", "dependency injection", "interfaces",
    "inheritance vs composition", "polymorphism", "hash tables", "big-O notation", "dynamic programming",
    "memoization", "tail recursion", "race conditions", "deadlocks", "mutexes", "threads vs processes",
    "REST APIs", "GraphQL", "database transactions", "database indexes", "normalization in databases",
    "SQL joins", "git branching", "git rebase vs merge", "continuous integration", "unit vs integration tests",
    "test-driven development", "type inference", "generics", "ownership and borrowing in Rust",
    "goroutines and channels", "virtual environments in Python", "list comprehensions", "context managers",
    "exceptions vs error codes", "regular expressions", "Unicode and UTF-8", "floating-point rounding errors",
    "caching strategies", "load balancing", "message queues", "microservices", "the CAP theorem",
    "idempotency", "semantic versioning", "code review etiquette", "refactoring", "design patterns",
    "the observer pattern", "the singleton pattern", "functional programming", "lazy evaluation",
    "stack vs heap memory", "buffer overflows", "SQL injection", "cross-site scripting", "hashing passwords",
    "JSON vs YAML", "makefiles", "Docker images vs containers", "environment variables", "logging best practices",
]
CONCEPT_TEMPLATES = [
    "Explain {concept} with a short example.", "What is {concept}, and when should I care about it?",
    "Explain {concept} to a junior developer.", "What are common mistakes people make with {concept}?",
    "Give me a mental model for {concept}.", "Explain {concept} in {language}, with code.",
    "I'm preparing for a technical interview. How should I explain {concept}?",
    "Write a short cheat sheet on {concept}.",
]

# SQL: (schema, task)
SQL_SCHEMAS = [
    "customers(id, name, city) and orders(id, customer_id, amount, created_at)",
    "employees(id, name, department, salary, manager_id)",
    "books(id, title, author_id, year) and authors(id, name, country)",
    "students(id, name), courses(id, title) and enrollments(student_id, course_id, grade)",
    "products(id, name, category, price) and sales(id, product_id, quantity, sold_at)",
    "flights(id, origin, destination, departs_at, seats) and bookings(id, flight_id, passenger)",
]
SQL_TASKS = [
    "returns the five rows with the highest totals", "finds duplicates", "counts rows per group and keeps groups with more than ten",
    "computes a running total ordered by date", "finds rows with no matching row in the other table",
    "ranks items within each group", "returns the second highest value", "computes month-over-month growth",
    "lists the top entry per category", "deletes rows older than one year safely",
]
SQL_TEMPLATES = [
    "Given the tables {schema}, write a SQL query that {task}.",
    "Tables: {schema}. Write a query that {task}, and explain it.",
    "Using {schema}, how do I write SQL that {task}?",
]

BASH_TASKS = [
    "renames all .jpeg files in a folder to .jpg", "finds the ten largest files under the current directory",
    "counts unique IP addresses in an access log", "backs up a directory to a dated tar.gz archive",
    "deletes files older than 30 days in /tmp/reports", "prints the lines that appear in one file but not another",
    "watches a directory and prints new file names", "checks whether a website returns HTTP 200",
    "replaces a word in every .md file recursively", "monitors disk usage and warns above 90%",
    "splits a large CSV into files of 1000 lines with the header kept", "shows which process listens on port 8080",
    "converts all .wav files to .mp3 with ffmpeg", "prints the total size of each subdirectory, sorted",
]
BASH_TEMPLATES = [
    "Write a Bash script that {task}.", "Give me a shell one-liner that {task}.",
    "Write a POSIX sh script that {task}, with comments.", "How can I do this in Bash: something that {task}?",
]
