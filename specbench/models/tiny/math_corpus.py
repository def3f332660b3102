"""The math world's text: GSM8K-style word problems, generated (pure Python, seeded, the same on
every machine) with solutions in GSM8K's own answer format, `48/2 = <<48/2=24>>24 clips`, and a
final `#### N`.

A problem is a story from one of four families (a quantity changed by 1-5 events, a shopping
bill, a rate over time, people compared), told with interchangeable phrasings, names, objects
and units, 2-6 solution steps, every number bounded (operands below 100 or small factors, every
intermediate result below 1000). Its *skeleton* is its question with every number replaced by
`N`; the split is a hash of the skeleton, so the held-out problems are stories whose wording the
training split never holds, not only new numbers in seen sentences.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

SPLITS = ("train", "validation", "heldout")
SEEDS = {"train": 0, "validation": 1, "heldout": 2}  # each split draws from its own stream
LIMIT = 999  # no number in a problem or its solution exceeds this
STEPS = (2, 6)  # calculations in a solution, fewest and most

NAMES = {
    "she": "Natalia Emma Olivia Ava Mia Sofia Lena Maya Chloe Ruth Grace Hannah Zoe Nora Lucy "
    "Clara Julia Iris Alice Rosa Tara Nina Eva Leah Ivy".split(),
    "he": "Liam Noah Oliver James Lucas Mason Ethan Leo Omar Jack Henry Samuel David Ravi Tom "
    "Felix Hugo Marco Ben Adam Owen Kai Paul Ivan Carlos".split(),
}
POSSESSIVE = {"she": "her", "he": "his"}
OBJECT_CASE = {"she": "her", "he": "him"}
THINGS = (
    "apples pears oranges marbles stickers cards stamps pencils crayons books shells cookies "
    "muffins eggs beads coins buttons balloons candies rocks plums lemons cupcakes toys"
).split()
CONTAINERS = "boxes bags packs jars crates baskets trays cases".split()
RELATIVES = "mother father sister brother aunt uncle friend neighbour cousin teacher".split()
SHOP_ITEMS = (
    "notebooks pens hats scarves mugs plates lamps kites balls puzzles shirts socks candles "
    "bowls towels brushes"
).split()
MACHINES = [
    ("baker", "bakes", "loaves"),
    ("printer", "prints", "pages"),
    ("farmer", "picks", "apples"),
    ("factory", "makes", "toys"),
    ("painter", "paints", "fences"),
    ("tailor", "sews", "shirts"),
    ("robot", "builds", "cars"),
    ("student", "reads", "pages"),
    ("pump", "fills", "buckets"),
    ("chef", "cooks", "meals"),
]
PERIODS = [("hour", "hours"), ("day", "days"), ("week", "weeks"), ("minute", "minutes")]


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str  # the step lines and the final "#### N", as GSM8K's answer field
    answer: int

    @property
    def skeleton(self) -> str:
        return re.sub(r"\d+", "N", self.question)

    @property
    def split(self) -> str:
        return split_of(self.skeleton)

    def text(self) -> str:
        """What the models train on: the prompt the task sends, then the solution."""
        return f"{prompt(self.question)} {self.solution}"


def prompt(question: str) -> str:
    return f"Q: {question}\nA:"


def split_of(skeleton: str) -> str:
    """90 / 5 / 5 by a hash of the skeleton (crc32: the same on every machine and Python)."""
    bucket = zlib.crc32(skeleton.encode()) % 20
    return "heldout" if bucket == 0 else "validation" if bucket == 1 else "train"


class Steps:
    """A solution under construction: `calc` writes one annotated calculation and returns its
    value, so a story reads as the arithmetic it asks for."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def calc(self, a: int, op: str, b: int) -> int:
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
        if op == "/" and a % b:
            raise Unfit
        if not 0 <= value <= LIMIT:
            raise Unfit
        return value

    def expr(self, a: int, op: str, b: int) -> tuple[str, int]:
        value = self.calc(a, op, b)
        return f"{a}{op}{b} = <<{a}{op}{b}={value}>>{value}", value

    def say(self, line: str) -> None:
        self.lines.append(line)

    def solution(self, answer: int) -> str:
        if not STEPS[0] <= len(self.lines) <= STEPS[1]:
            raise Unfit
        return "\n".join(self.lines + [f"#### {answer}"])


class Unfit(Exception):
    """Drawn numbers broke a bound (a negative count, an inexact share, a result over LIMIT, a
    solution outside STEPS): the generator draws again."""


@dataclass
class Person:
    name: str
    pronoun: str

    @property
    def Pronoun(self) -> str:  # noqa: N802 - the capitalised form a sentence opens with
        return self.pronoun.capitalize()

    @property
    def poss(self) -> str:
        return POSSESSIVE[self.pronoun]

    @property
    def obj(self) -> str:
        return OBJECT_CASE[self.pronoun]


def person(rng: random.Random, avoid: tuple[str, ...] = ()) -> Person:
    pronoun = rng.choice(("she", "he"))
    name = rng.choice([n for n in NAMES[pronoun] if n not in avoid])
    return Person(name, pronoun)


def pick(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


# -- family 1: a quantity changed by events -------------------------------------------------


def event_gain(rng, p: Person, thing: str, have: int, s: Steps) -> tuple[str, int]:
    k = rng.randint(2, 60)
    verb = pick(rng, "finds", "buys", "gets", "is given", "collects", "wins")
    opener = pick(rng, "Then", "Later", "After that,", "Next,", "The next day,")
    line, have = s.expr(have, "+", k)
    s.say(
        pick(
            rng, f"{p.name} now has {line} {thing}.", f"After that {p.pronoun} has {line} {thing}."
        )
    )
    return f"{opener} {p.pronoun} {verb} {k} more {thing}.", have


def event_lose(rng, p: Person, thing: str, have: int, s: Steps) -> tuple[str, int]:
    if have < 3:
        raise Unfit
    k = rng.randint(1, have - 1)
    verb = pick(rng, "gives away", "loses", "sells", "uses", "trades away", "drops")
    opener = pick(rng, "Then", "Later", "After that,", "Next,", "On Monday")
    line, have = s.expr(have, "-", k)
    s.say(pick(rng, f"{p.Pronoun} has {line} {thing} left.", f"That leaves {line} {thing}."))
    return f"{opener} {p.pronoun} {verb} {k} {thing}.", have


def event_boxes(rng, p: Person, thing: str, have: int, s: Steps) -> tuple[str, int]:
    n, per = rng.randint(2, 9), rng.randint(2, 12)
    box = rng.choice(CONTAINERS)
    line, extra = s.expr(n, "*", per)
    s.say(
        pick(
            rng,
            f"The {box} hold {line} {thing}.",
            f"{p.Pronoun} gets {line} {thing} from the {box}.",
        )
    )
    line, have = s.expr(have, "+", extra)
    s.say(
        pick(rng, f"In total {p.pronoun} has {line} {thing}.", f"So {p.name} has {line} {thing}.")
    )
    who = pick(rng, p.pronoun, f"{p.poss} {rng.choice(RELATIVES)}")
    verb = "buys" if who == p.pronoun else "brings"
    text = f"{who[0].upper()}{who[1:]} {verb} {n} {box} with {per} {thing} in each."
    return text, have


def event_half(rng, p: Person, thing: str, have: int, s: Steps) -> tuple[str, int]:
    if have % 2 or have < 2:
        raise Unfit
    to = rng.choice(RELATIVES)
    line, half = s.expr(have, "/", 2)
    s.say(f"{p.Pronoun} gives {line} {thing} to {p.poss} {to}.")
    line, have = s.expr(have, "-", half)
    s.say(pick(rng, f"{p.Pronoun} keeps {line} {thing}.", f"That leaves {line} {thing}."))
    return f"{p.Pronoun} gives half of {p.poss} {thing} to {p.poss} {to}.", have


def event_times(rng, p: Person, thing: str, have: int, s: Steps) -> tuple[str, int]:
    m = rng.randint(2, 4)
    word = {2: "twice", 3: "three times", 4: "four times"}[m]
    line, more = s.expr(have, "*", m)
    s.say(f"{p.Pronoun} gets {line} more {thing}.")
    line, have = s.expr(have, "+", more)
    s.say(pick(rng, f"Now {p.pronoun} has {line} {thing}.", f"So {p.name} has {line} {thing}."))
    who = rng.choice(RELATIVES)
    return (
        f"{p.poss.capitalize()} {who} gives {p.obj} {word} as many {thing} as {p.pronoun} has.",
        have,
    )


EVENTS: list[Callable] = [event_gain, event_lose, event_boxes, event_half, event_times]


def story(rng: random.Random) -> Problem:
    """A start, 1-4 events, and a question about the end (or an equal share of it)."""
    p, thing = person(rng), rng.choice(THINGS)
    have = rng.randint(5, 90)
    s = Steps()
    sentences = [
        pick(
            rng,
            f"{p.name} has {have} {thing}.",
            f"{p.name} had {have} {thing} at first.",
            f"There are {have} {thing} in {p.name}'s room.",
        )
    ]
    for _ in range(rng.randint(1, 4)):
        text, have = rng.choice(EVENTS)(rng, p, thing, have, s)
        sentences.append(text)
    if rng.random() < 0.3:
        friends = rng.randint(2, 9)
        line, share = s.expr(have, "/", friends)
        s.say(f"Each friend gets {line} {thing}.")
        sentences.append(
            f"{p.Pronoun} shares them equally among {friends} friends. How many {thing} does "
            "each friend get?"
        )
        have = share
    else:
        sentences.append(
            pick(
                rng,
                f"How many {thing} does {p.name} have now?",
                f"How many {thing} does {p.pronoun} have in the end?",
                f"How many {thing} are left?",
            )
        )
    return Problem(" ".join(sentences), s.solution(have), have)


# -- family 2: a shopping bill -----------------------------------------------------------


def shopping(rng: random.Random) -> Problem:
    """Two or three kinds of item at a price each, a total, and optionally the change."""
    p = person(rng)
    items = rng.sample(SHOP_ITEMS, rng.randint(2, 3))
    s = Steps()
    parts, costs = [], []
    for item in items:
        n, price = rng.randint(2, 9), rng.randint(2, 25)
        parts.append(f"{n} {item} for ${price} each")
        line, cost = s.expr(n, "*", price)
        s.say(
            pick(
                rng,
                f"The {item} cost {line} dollars.",
                f"{p.Pronoun} pays {line} dollars for the {item}.",
            )
        )
        costs.append(cost)
    total = costs[0]
    for cost in costs[1:]:
        line, total = s.expr(total, "+", cost)
        s.say(
            pick(
                rng,
                f"Together that is {line} dollars.",
                f"So far {p.pronoun} spends {line} dollars.",
            )
        )
    bought = ", ".join(parts[:-1]) + f" and {parts[-1]}"
    shop = pick(rng, "the market", "a shop", "the mall", "a fair", "the store")
    opening = f"{p.name} goes to {shop} and buys {bought}."
    if rng.random() < 0.5:
        bills = [b for b in (50, 100, 200, 500) if b >= total]
        if not bills:
            raise Unfit
        bill = rng.choice(bills)
        line, change = s.expr(bill, "-", total)
        s.say(f"{p.Pronoun} gets {line} dollars in change.")
        question = (
            f"{opening} {p.Pronoun} pays with a ${bill} bill. How much change does {p.pronoun} get?"
        )
        return Problem(question, s.solution(change), change)
    question = f"{opening} How much does {p.pronoun} spend in all?"
    return Problem(question, s.solution(total), total)


# -- family 3: a rate over time ----------------------------------------------------------


def rate(rng: random.Random) -> Problem:
    """Work at one rate, then another, optionally less what is lost or used."""
    worker, verb, thing = rng.choice(MACHINES)
    unit, units = rng.choice(PERIODS)
    r1, t1 = rng.randint(2, 30), rng.randint(2, 9)
    s = Steps()
    line, first = s.expr(r1, "*", t1)
    s.say(f"In the first {t1} {units} the {worker} {verb} {line} {thing}.")
    question = f"A {worker} {verb} {r1} {thing} every {unit} for {t1} {units}."
    total = first
    if rng.random() < 0.7:
        r2, t2 = rng.randint(2, 30), rng.randint(2, 9)
        line, second = s.expr(r2, "*", t2)
        s.say(f"Then the {worker} {verb} {line} more {thing}.")
        line, total = s.expr(first, "+", second)
        s.say(f"Altogether that is {line} {thing}.")
        question += f" Then the {worker} {verb} {r2} {thing} every {unit} for {t2} more {units}."
    if rng.random() < 0.4:
        if total < 3:
            raise Unfit
        bad = rng.randint(1, total // 3)
        line, total = s.expr(total, "-", bad)
        s.say(f"Without the {bad} bad ones there are {line} {thing}.")
        question += f" {bad} of the {thing} are bad."
        ask = f"How many good {thing} are there?"
    else:
        ask = pick(
            rng,
            f"How many {thing} are there in total?",
            f"How many {thing} does the {worker} make in all?",
        )
    return Problem(f"{question} {ask}", s.solution(total), total)


# -- family 4: people compared -----------------------------------------------------------


def compare(rng: random.Random) -> Problem:
    """A has n; B has k more (or fewer, or m times as many); C relates to B; the total."""
    a = person(rng)
    b = person(rng, (a.name,))
    c = person(rng, (a.name, b.name))
    thing = rng.choice(THINGS)
    have_a = rng.randint(3, 60)
    s = Steps()
    sentences = [f"{a.name} has {have_a} {thing}."]

    def relate(who: Person, base: Person, base_has: int) -> int:
        kind = rng.choice(("more", "fewer", "times"))
        if kind == "more":
            k = rng.randint(2, 40)
            sentences.append(f"{who.name} has {k} more {thing} than {base.name}.")
            line, value = s.expr(base_has, "+", k)
        elif kind == "fewer":
            if base_has < 3:
                raise Unfit
            k = rng.randint(1, base_has - 1)
            sentences.append(f"{who.name} has {k} fewer {thing} than {base.name}.")
            line, value = s.expr(base_has, "-", k)
        else:
            m = rng.randint(2, 5)
            sentences.append(f"{who.name} has {m} times as many {thing} as {base.name}.")
            line, value = s.expr(base_has, "*", m)
        s.say(f"{who.name} has {line} {thing}.")
        return value

    have_b = relate(b, a, have_a)
    counts = [have_a, have_b]
    if rng.random() < 0.6:
        counts.append(relate(c, b, have_b))
    total = counts[0]
    for count in counts[1:]:
        line, total = s.expr(total, "+", count)
        s.say(f"Together they have {line} {thing}.")
    names = [a.name, b.name, c.name][: len(counts)]
    sentences.append(f"How many {thing} do {', '.join(names[:-1])} and {names[-1]} have together?")
    return Problem(" ".join(sentences), s.solution(total), total)


FAMILIES: list[Callable[[random.Random], Problem]] = [story, story, shopping, rate, compare]


def draw(rng: random.Random) -> Problem:
    """One problem; a draw that breaks a bound is drawn again from the same stream."""
    while True:
        try:
            return rng.choice(FAMILIES)(rng)
        except Unfit:
            continue


def problems(split: str, n: int) -> list[Problem]:
    """The split's first `n` problems, in one order on every machine."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    return list(_stream(split, n))


def _stream(split: str, n: int) -> Iterator[Problem]:
    """Training problems differ in text; measured ones (validation, held-out) in wording, so
    no two of them are the same story with other numbers."""
    rng = random.Random(f"tiny_math-{SEEDS[split]}")
    seen: set[str] = set()
    while len(seen) < n:
        problem = draw(rng)
        key = problem.question if split == "train" else problem.skeleton
        if problem.split == split and key not in seen:
            seen.add(key)
            yield problem
