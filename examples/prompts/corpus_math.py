"""Math prompts for the training corpus: word-problem families with seeded numbers, plus concept prompts.

Each family returns ``(question, answer)``; the answer (a short worked result) is used as the
assistant turn of multi-turn samples. The held-out math scenarios (tiling, recipe scaling, two
travellers meeting, saving towards a goal, mixtures) live in heldout_prompts.py and are not used here.

    python examples/prompts/make_training_corpus.py
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from corpus_words import NAMES

ITEMS = ["apples", "notebooks", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "candles",
         "postcards", "tennis balls", "plant pots", "cupcakes", "batteries", "bookmarks", "paintbrushes"]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Osaka", "Lima", "Vienna", "Perth", "Montreal", "Seoul", "Cairo"]
SUFFIXES = ["", "", " Show your work.", " Think step by step.", " Explain each step.", " Give only the final answer.",
            " Explain your reasoning briefly.", " Check your answer at the end.", " Show the calculation."]

CONCEPTS = [
    "Prove that the sum of two odd numbers is even.", "Why is dividing by zero undefined?",
    "Explain why a negative times a negative is positive.", "Prove that the square root of 2 is irrational.",
    "Explain what a derivative measures, with a real-world example.", "What is the difference between mean and median, and when is each better?",
    "Explain the Pythagorean theorem and sketch a proof.", "Why does 0.999... equal 1?",
    "Explain what a prime number is and why 1 is not prime.", "What is a logarithm, intuitively?",
    "Explain the difference between permutations and combinations.", "Why are there infinitely many prime numbers?",
    "What does it mean for two events to be independent?", "Explain standard deviation to a beginner.",
    "What is the binomial theorem used for?", "Explain what an integral represents geometrically.",
    "Explain the law of large numbers with a coin example.", "What is a function, in the mathematical sense?",
    "Why is the angle sum of a triangle 180 degrees?", "Explain modular arithmetic using a clock.",
    "What is a matrix and what can it represent?", "Explain what 'correlation is not causation' means with numbers.",
    "Prove that the product of three consecutive integers is divisible by 6.", "Explain what pi is and why it is irrational.",
    "What is Bayes' theorem? Give an example with a medical test.", "Explain exponential growth versus linear growth.",
    "Why does the harmonic series diverge?", "Explain how to complete the square.", "What is a vector?",
    "Explain what a limit is without epsilon-delta notation.", "Why do we need complex numbers?",
    "Explain the difference between a sequence and a series.", "What is the gambler's fallacy?",
    "Explain significant figures and why they matter in measurements.", "How does long division work, and why?",
]
CONCEPT_PREFIXES = ["", "", "In simple terms: ", "For a high-school student: ", "Briefly: "]


def _money(x: float) -> str:
    return f"${x:,.2f}"


def polynomial(cs: list[int]) -> str:
    """Coefficients, highest power first, as text: [3, -4, 0, 9] -> '3x^3 - 4x^2 + 9'."""
    out = ""
    for i, c in enumerate(cs):
        power = len(cs) - 1 - i
        if c == 0:
            continue
        term = ("" if abs(c) == 1 and power else str(abs(c))) + ("x" if power else "") + (f"^{power}" if power > 1 else "")
        out += (("-" if c < 0 else "") if not out else (" - " if c < 0 else " + ")) + term
    return out


def families(rng: random.Random) -> list:
    """The word-problem families, each a function returning (question, answer)."""
    name = lambda: rng.choice(NAMES)  # noqa: E731 - a one-word slot filler
    item = lambda: rng.choice(ITEMS)  # noqa: E731

    def change():
        n, price = rng.randint(3, 12), rng.choice([0.75, 1.25, 2, 2.5, 3, 4.5, 6])
        pay = (int(n * price) // 10 + 1) * 10 + rng.choice([0, 10, 20])
        q = rng.choice(["{p} buys {n} {i} at {c} each and pays with a {pay} note. How much change does {p} get?",
                        "{n} {i} cost {c} each. If {p} hands over {pay}, what change should come back?"])
        return q.format(p=name(), n=n, i=item(), c=_money(price), pay=_money(pay)), f"Change: {_money(pay - n * price)}."

    def discount_tax():
        x, d, t = rng.randint(20, 400), rng.choice([10, 15, 20, 25, 30, 40]), rng.choice([5, 8, 10, 20])
        final = x * (1 - d / 100) * (1 + t / 100)
        return (f"A coat is priced at ${x}. It is {d}% off, and then {t}% sales tax is added to the discounted "
                f"price. What is the final price?"), f"Final price: {_money(final)}."

    def journey():
        v, t, v2, t2 = rng.randint(30, 110), rng.randint(2, 7), rng.randint(40, 120), rng.randint(1, 4)
        q = rng.choice([f"A train travels at {v} km/h for {t} hours and then at {v2} km/h for {t2} hours. "
                        "How far does it travel in total, and what is its average speed?",
                        f"A bus drives {v * t} km at {v} km/h, then {v2 * t2} km at {v2} km/h. "
                        "What is its average speed for the whole trip?"])
        return q, f"Distance {v * t + v2 * t2} km; average speed {(v * t + v2 * t2) / (t + t2):.2f} km/h."

    def percent_change():
        a, p, years = rng.randint(2, 90) * 100, rng.choice([2, 3, 4, 5, 8, 10, 12]), rng.randint(2, 5)
        sign = rng.choice([1, -1])
        word = "grows" if sign > 0 else "shrinks"
        end = a * (1 + sign * p / 100) ** years
        return (f"A town of {a} people {word} by {p}% each year. What is its population after {years} years? "
                "Round to the nearest person."), f"About {round(end)} people."

    def ratio():
        a, b, k = rng.randint(1, 7), rng.randint(1, 7), rng.randint(4, 30)
        total = (a + b) * k * 5
        return (f"{name()} and {name()} share ${total} in the ratio {a}:{b}. How much does each get?"), \
            f"${a * k * 5} and ${b * k * 5}."

    def ages():
        child, k, d = rng.randint(4, 15), rng.randint(2, 4), rng.randint(2, 12)
        s = child * (k + 1) + 2 * d
        p = name()
        return (f"{p}'s aunt is {k} times as old as {p}. In {d} years the sum of their ages will be {s}. "
                "How old are they now?"), f"{p} is {child} and the aunt is {k * child}."

    def path_area():
        w, h, p = rng.randint(3, 20), rng.randint(3, 20), rng.choice([1, 1.5, 2, 3])
        area = (w + 2 * p) * (h + 2 * p) - w * h
        return (f"A rectangular lawn is {w} m by {h} m. A gravel path {p} m wide surrounds it. "
                "What is the area of the path?"), f"{area:g} square metres."

    def pipes():
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return (f"One hose fills a pool in {a} hours and another in {b} hours. How long do both take together?"), \
            f"{a * b / (a + b):.2f} hours."

    def compound():
        p, r, n = rng.randint(5, 50) * 100, rng.choice([2, 3, 4, 5, 6]), rng.randint(2, 10)
        return (f"You invest ${p} at {r}% interest compounded yearly. How much do you have after {n} years? "
                "Round to the nearest cent."), f"{_money(p * (1 + r / 100) ** n)}."

    def fractions():
        a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
        op = rng.choice(["+", "-", "*", "/"])
        x, y = Fraction(a, b), Fraction(c, d)
        res = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
        return f"Compute {a}/{b} {op} {c}/{d} and simplify the result.", f"{res}."

    def linear():
        a, x, b = rng.randint(2, 15), rng.randint(-12, 20), rng.randint(-40, 40)
        return f"Solve for x: {a}x {'+' if b >= 0 else '-'} {abs(b)} = {a * x + b}.", f"x = {x}."

    def quadratic():
        r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
        b, c = -(r1 + r2), r1 * r2
        return (f"Solve x^2 {'+' if b >= 0 else '-'} {abs(b)}x {'+' if c >= 0 else '-'} {abs(c)} = 0."), \
            f"x = {min(r1, r2)} or x = {max(r1, r2)}."

    def system():
        x, y = rng.randint(-8, 12), rng.randint(-8, 12)
        a, b, c, d = rng.randint(1, 6), rng.randint(1, 6), rng.randint(1, 6), rng.randint(-6, -1)
        return (f"Solve the system: {a}x + {b}y = {a * x + b * y} and {c}x - {-d}y = {c * x + d * y}."), \
            f"x = {x}, y = {y}."

    def average_needed():
        scores = [rng.randint(55, 100) for _ in range(rng.randint(3, 7))]
        goal = round(sum(scores) / len(scores)) + rng.randint(1, 5)
        need = goal * (len(scores) + 1) - sum(scores)
        return (f"{name()} scored {', '.join(map(str, scores))} on quizzes. What score on the next quiz would "
                f"make the average exactly {goal}?"), f"{need}."

    def balls():
        r, g, b = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        n = r + g + b
        p = Fraction(r * (r - 1) + g * (g - 1) + b * (b - 1), n * (n - 1))
        return (f"A box holds {r} red, {g} green and {b} blue counters. Two are drawn without replacement. "
                "What is the probability that they are the same colour?"), f"{p}."

    def dice():
        s, sides = rng.randint(3, 11), rng.choice([6, 6, 8, 10])
        event = rng.choice(["the total is {s}", "the total is at least {s}", "the product is even",
                            "at least one die shows {k}", "the two dice differ by {d}"])
        k, d = rng.randint(1, sides), rng.randint(1, 4)
        test = {"the total is {s}": lambda i, j: i + j == s, "the total is at least {s}": lambda i, j: i + j >= s,
                "the product is even": lambda i, j: i * j % 2 == 0, "at least one die shows {k}": lambda i, j: k in (i, j),
                "the two dice differ by {d}": lambda i, j: abs(i - j) == d}[event]
        ways = sum(1 for i in range(1, sides + 1) for j in range(1, sides + 1) if test(i, j))
        return (f"Two fair {sides}-sided dice are rolled. What is the probability that {event.format(s=s, k=k, d=d)}?",
                f"{Fraction(ways, sides * sides)}.")

    def committee():
        n, k = rng.randint(6, 15), rng.randint(2, 5)
        return (f"In how many ways can a committee of {k} be chosen from {n} people? And if one of them must be "
                "the chair?"), f"{math.comb(n, k)} ways; {math.comb(n, k) * k} with a chair."

    def arrangements():
        word = rng.choice(["BANANA", "LETTER", "PEPPER", "GARDEN", "SUMMER", "CASTLE", "BALLOON", "PUZZLE", "RIVER",
                           "COFFEE", "TOMATO", "KETTLE", "PARROT", "MIRROR", "ORANGE", "BUTTER", "CANOE", "SEASON",
                           "LADDER", "WINDOW", "COOKIE", "PEBBLE", "TUNNEL", "MAMMAL", "HAMMOCK"])
        count = math.factorial(len(word))
        for ch in sorted(set(word)):
            count //= math.factorial(word.count(ch))
        return f"How many distinct arrangements of the letters of {word} are there?", f"{count}."

    def derivative():
        cs = [rng.randint(1, 9)] + [rng.randint(-6, 9) for _ in range(rng.randint(2, 4))]
        terms = polynomial(cs)
        x0 = rng.randint(-3, 3)
        value = sum(c * (len(cs) - 1 - i) * x0 ** (len(cs) - 2 - i) for i, c in enumerate(cs) if len(cs) - 1 - i > 0)
        return f"Differentiate f(x) = {terms} and evaluate f'({x0}).", f"f'({x0}) = {value}."

    def integral():
        a, b, lo, hi = rng.randint(1, 6), rng.randint(-5, 5), rng.randint(0, 2), rng.randint(3, 6)
        val = Fraction(a, 3) * (hi ** 3 - lo ** 3) + Fraction(b, 1) * (hi - lo)
        return f"Evaluate the integral of {a}x^2 + {b} from x = {lo} to x = {hi}.", f"{val}."

    def arithmetic_seq():
        a, d, n = rng.randint(-10, 20), rng.randint(2, 9), rng.randint(10, 60)
        return (f"An arithmetic sequence starts {a}, {a + d}, {a + 2 * d}, ... What is the {n}th term, and what "
                f"is the sum of the first {n} terms?"), f"Term {a + (n - 1) * d}; sum {n * (2 * a + (n - 1) * d) // 2}."

    def geometric():
        a, r, n = rng.randint(1, 9), rng.choice([2, 3, Fraction(1, 2), Fraction(1, 3)]), rng.randint(4, 9)
        s = a * (1 - r ** n) / (1 - r)
        return f"Find the sum of the first {n} terms of the geometric sequence with first term {a} and ratio {r}.", f"{s}."

    def buses():
        a, b = rng.choice([6, 8, 9, 10, 12, 15]), rng.choice([14, 16, 18, 20, 24, 25])
        h, m = rng.randint(6, 9), rng.choice([0, 15, 30])
        lcm = a * b // math.gcd(a, b)
        t = h * 60 + m + lcm
        return (f"Bus A leaves the station every {a} minutes and bus B every {b} minutes. Both leave together at "
                f"{h}:{m:02d}. When do they next leave together?"), f"At {t // 60}:{t % 60:02d} ({lcm} minutes later)."

    def factorize():
        n = rng.choice([2, 3, 5, 7]) ** rng.randint(1, 3) * rng.choice([3, 5, 7, 11, 13]) * rng.randint(2, 9)
        f, k, parts = n, 2, []
        while f > 1:
            while f % k == 0:
                parts.append(k)
                f //= k
            k += 1
        return f"Find the prime factorisation of {n}.", " x ".join(map(str, parts)) + "."

    def base():
        n, b = rng.randint(20, 999), rng.choice([2, 5, 8, 16])
        digits, m = "", n
        while m:
            digits = "0123456789ABCDEF"[m % b] + digits
            m //= b
        return f"Convert {n} from base 10 to base {b}.", f"{digits}."

    def ladder():
        h, d = rng.choice([(3, 4), (5, 12), (6, 8), (8, 15), (7, 24), (9, 12), (12, 16)])
        return (f"A ladder reaches {h} m up a wall, and its foot is {d} m from the wall. How long is the ladder?"), \
            f"{math.hypot(h, d):g} m."

    def pizza():
        d1, d2 = rng.choice([(25, 35), (20, 30), (30, 40), (28, 36)])
        p1, p2 = rng.randint(6, 10), rng.randint(11, 18)
        return (f"A {d1} cm pizza costs ${p1} and a {d2} cm pizza costs ${p2}. Which is better value per square "
                "centimetre?"), f"{d1} cm: {p1 / (math.pi * (d1 / 2) ** 2):.4f} $/cm^2; {d2} cm: {p2 / (math.pi * (d2 / 2) ** 2):.4f} $/cm^2."

    def tank():
        l, w, h = rng.randint(30, 120), rng.randint(20, 60), rng.randint(20, 60)
        return f"A fish tank is {l} cm long, {w} cm wide and {h} cm tall. How many litres does it hold when full?", \
            f"{l * w * h / 1000:g} litres."

    def statistics():
        xs = [rng.randint(1, 30) for _ in range(rng.randint(5, 9))]
        s = sorted(xs)
        med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
        return (f"Find the mean, median and range of: {', '.join(map(str, xs))}."), \
            f"Mean {sum(xs) / len(xs):.2f}, median {med:g}, range {max(xs) - min(xs)}."

    def wage():
        rate, hours = rng.choice([12, 14.5, 16, 18, 21.25, 25]), rng.randint(36, 55)
        pay = rate * min(hours, 40) + rate * 1.5 * max(0, hours - 40)
        return (f"{name()} earns ${rate} an hour, and time and a half for hours over 40 in a week. What is the pay "
                f"for a {hours}-hour week?"), f"{_money(pay)}."

    def fuel():
        km, use, price = rng.randint(80, 900), rng.choice([4.5, 5.5, 6, 7.2, 8]), rng.choice([1.45, 1.6, 1.79, 1.9])
        return (f"A car uses {use} litres per 100 km. Fuel costs ${price} per litre. How much does a {km} km trip "
                "cost?"), f"{_money(km / 100 * use * price)}."

    def flight():
        h, m, dur, off = rng.randint(5, 22), rng.choice([0, 10, 25, 40, 55]), rng.randint(90, 720), rng.randint(-8, 9)
        t = (h * 60 + m + dur + off * 60) % (24 * 60)
        return (f"A flight leaves {rng.choice(CITIES)} at {h}:{m:02d} local time and lasts {dur // 60} h "
                f"{dur % 60} min. The destination is {abs(off)} hours {'ahead' if off >= 0 else 'behind'}. "
                "What is the local arrival time?"), f"{t // 60}:{t % 60:02d} local time."

    def weekday():
        days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        start, n = rng.randrange(7), rng.randint(10, 1000)
        return f"Today is {days[start]}. What day of the week will it be in {n} days?", f"{days[(start + n) % 7]}."

    def matrix():
        a, b, c, d = (rng.randint(-5, 9) for _ in range(4))
        return f"Find the determinant of the matrix [[{a}, {b}], [{c}, {d}]] and say whether it is invertible.", \
            f"det = {a * d - b * c}; {'invertible' if a * d - b * c else 'not invertible'}."

    def logs():
        b, x = rng.choice([2, 3, 5, 10]), rng.randint(2, 6)
        k = rng.choice([2, 3, 7])
        return f"Solve {b}^x = {b ** x}, then solve {b}^x = {b ** x * k} to two decimal places.", \
            f"x = {x}, then x = {x + math.log(k, b):.2f}."

    return [change, discount_tax, journey, percent_change, ratio, ages, path_area, pipes, compound, fractions,
            linear, quadratic, system, average_needed, balls, dice, committee, arrangements, derivative, integral,
            arithmetic_seq, geometric, buses, factorize, base, ladder, pizza, tank, statistics, wage, fuel,
            flight, weekday, matrix, logs]


def concept(rng: random.Random) -> str:
    return rng.choice(CONCEPT_PREFIXES) + rng.choice(CONCEPTS)
