"""`knights_knaves`: logic puzzles with exactly one solution, checked by brute force.

Each of N inhabitants (options `min_people`..`max_people`, 2..8 allowed, default 2..4)
makes one statement built recursively: atoms "X is a knight" / "X is a knave", combined
with not, and, or, if-then (implies), if-and-only-if, up to `depth` levels of nesting
(default 2, at least 1) and `width` operands per and/or (default 2). Knights always
tell the truth, knaves always lie: an assignment is a solution when every statement is
true exactly for the knights. Only puzzles with exactly one solution (brute force over
all 2^N assignments) are kept.

Two options size the puzzle's *surface* for a tiny CPU model without changing its logic:
- `names`: "people" (default; N distinct first names drawn at random, in random order) or
  "letters" (the inhabitants are A, B, C, ... in that order). With people the model must bind
  each name in a statement to a speaker, which a ~3 M-parameter model had not learned after 370
  supervised steps (compact style, lr 3e-3: greedy exact answers 0.00 on held-out puzzles, issue
  10); with letters the binding is positional and the same model is at 0.5 after 100 steps.
- `style`: "prose" (default; the rules, the inhabitants, "X says: it is not true that ..."), or
  "compact" ("A: not B knight. B: A knave iff B knight." and nothing else; ~50 bytes for two
  people instead of ~220). A prompt's tokens are what a CPU step costs, so compact trains
  ~3.4x more steps in the same time (measured: 0.9 vs 3.0 s per 32-row step, one thread).
The held-out split is by logic (`canonical`: each statement's truth table over all 2^N assignments,
in speaker order), so no wording, naming or phrasing of a held-out puzzle is ever trained on. Two
people admit only 108 such puzzles at any depth (each of the 4 assignments is consistent for 1 of
the 4 truth-value pairs of the two statements, and exactly one must be: 4 x 3^3), too few to hold out
64; the hilo-kk preset therefore uses 3 people (presets/hilo-kk.yaml).

Answer format (the gold): "(1) Alice is a knight (2) Bob is a knave", one clause per
inhabitant in puzzle order. Parsing is tolerant in form: any order, any whitespace and
case, numbering optional, clauses may be separated by commas, semicolons, periods or
"and". It is strict in content: only the puzzle's names, each at most once, and nothing
else in the text.

Reward table:
- 1.0: every inhabitant named exactly once with the right role (correct).
- 0.1: well formed but wrong: a wrong role, or a person missing (reason says which).
- 0.0: malformed: no clause, stray text, an unknown name, a name given twice.
"""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

from trainers.tasks.base import MAX_COMPLETION_CHARS, Score, Task, check_count

NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Iris", "Jack",
         "Kate", "Liam", "Mia", "Noah", "Olga", "Paul", "Quinn", "Rosa", "Sam", "Tina")
LETTERS = "ABCDEFGH"   # names=letters: one per inhabitant, in order (max_people <= 8)
NAME_STYLES = ("people", "letters")
STYLES = ("prose", "compact")
BINARY = ("implies", "iff")
NARY = ("and", "or")
MAX_ATTEMPTS = 100_000

# A statement is a nested tuple:
#   ("is", person_index, knight: bool) | ("not", s) | ("and", s1, s2, ...) | ("or", ...)
#   | ("implies", s1, s2) | ("iff", s1, s2)


@dataclass(frozen=True)
class KKProblem:
    names: tuple[str, ...]
    statements: tuple[tuple, ...]   # statements[i] is what names[i] says
    solution: tuple[bool, ...]      # True = knight


def evaluate(statement: tuple, knights: tuple[bool, ...]) -> bool:
    """Truth value of `statement` when knights[i] says whether person i is a knight."""
    op = statement[0]
    if op == "is":
        return knights[statement[1]] == statement[2]
    if op == "not":
        return not evaluate(statement[1], knights)
    if op == "and":
        return all(evaluate(s, knights) for s in statement[1:])
    if op == "or":
        return any(evaluate(s, knights) for s in statement[1:])
    a, b = evaluate(statement[1], knights), evaluate(statement[2], knights)
    return (not a or b) if op == "implies" else a == b


def solutions(statements: tuple[tuple, ...]) -> list[tuple[bool, ...]]:
    """Every consistent assignment: each person is a knight iff their statement is true."""
    n = len(statements)
    return [k for k in itertools.product((True, False), repeat=n)
            if all(evaluate(s, k) == k[i] for i, s in enumerate(statements))]


def truth_table(statement: tuple, people: int) -> str:
    """The statement's truth value under every assignment (itertools.product order, knight first),
    as '1'/'0' characters: two statements with the same table say the same thing."""
    return "".join("1" if evaluate(statement, k) else "0" for k in itertools.product((True, False), repeat=people))


def as_lists(statement: tuple) -> list:
    """A statement as nested JSON lists: ["is", i, "knight"|"knave"], ["not", s], ["and"|"or", s, ...],
    ["implies"|"iff", a, b]."""
    if statement[0] == "is":
        return ["is", statement[1], "knight" if statement[2] else "knave"]
    return [statement[0]] + [as_lists(s) for s in statement[1:]]


def render(statement: tuple, names: tuple[str, ...], top: bool = True) -> str:
    op = statement[0]
    if op == "is":
        return f"{names[statement[1]]} is a {'knight' if statement[2] else 'knave'}"
    if op == "not":
        text = f"it is not true that {render(statement[1], names, False)}"
    elif op in NARY:
        text = f" {op} ".join(render(s, names, False) for s in statement[1:])
    elif op == "implies":
        text = f"if {render(statement[1], names, False)} then {render(statement[2], names, False)}"
    else:
        text = f"{render(statement[1], names, False)} if and only if {render(statement[2], names, False)}"
    return text if top else f"({text})"


def render_compact(statement: tuple, names: tuple[str, ...], top: bool = True) -> str:
    """The compact style: "A knight", "not B knave", "A knight and B knave", "A knave implies B
    knight", "A knight iff B knight"; composite operands in parentheses, as in `render`."""
    op = statement[0]
    if op == "is":
        return f"{names[statement[1]]} {'knight' if statement[2] else 'knave'}"
    if op == "not":
        text = f"not {render_compact(statement[1], names, False)}"
    else:
        text = f" {op} ".join(render_compact(s, names, False) for s in statement[1:])
    return text if top else f"({text})"


class KnightsKnaves(Task):
    """Knights always tell the truth, knaves always lie: who is which?"""

    def __init__(self, min_people: int = 2, max_people: int = 4, depth: int = 2, width: int = 2,
                 names: str = "people", style: str = "prose"):
        if not (2 <= min_people <= max_people <= 8):
            raise ValueError(f"knights_knaves: need 2 <= min_people <= max_people <= 8, got {min_people}, {max_people}")
        # depth 0 (atoms only) never gives a unique solution: flipping every role flips the truth
        # of every atom and the role of every speaker, so consistent solutions come in pairs.
        if not (1 <= depth <= 4):
            raise ValueError(f"knights_knaves: depth must be 1..4, got {depth}")
        if not (2 <= width <= 4):
            raise ValueError(f"knights_knaves: width must be 2..4, got {width}")
        if names not in NAME_STYLES:
            raise ValueError(f"knights_knaves: names must be one of {', '.join(NAME_STYLES)}, got {names!r}")
        if style not in STYLES:
            raise ValueError(f"knights_knaves: style must be one of {', '.join(STYLES)}, got {style!r}")
        self.min_people, self.max_people, self.depth, self.width = min_people, max_people, depth, width
        self.names, self.style = names, style

    def options(self):
        return {"min_people": self.min_people, "max_people": self.max_people,
                "depth": self.depth, "width": self.width, "names": self.names, "style": self.style}

    def generate(self, n, seed):
        check_count(n)
        rng = random.Random(f"knights_knaves:{seed}")
        return [self._one(rng) for _ in range(n)]

    def _one(self, rng: random.Random) -> KKProblem:
        people = rng.randint(self.min_people, self.max_people)
        names = tuple(rng.sample(NAMES, people))  # drawn either way: letters change the names, not the logic
        if self.names == "letters":
            names = tuple(LETTERS[:people])
        for _ in range(MAX_ATTEMPTS):  # rejection sampling; most settings accept 1 in a few
            statements = tuple(self._statement(rng, people, self.depth) for _ in range(people))
            found = solutions(statements)
            if len(found) == 1:
                return KKProblem(names, statements, found[0])
        raise RuntimeError(f"knights_knaves: no uniquely solvable puzzle in {MAX_ATTEMPTS} tries with {self.options()}")

    def _statement(self, rng: random.Random, people: int, depth: int) -> tuple:
        if depth == 0 or rng.random() < 0.4:
            return ("is", rng.randrange(people), rng.random() < 0.5)
        op = rng.choice(("not",) + NARY + BINARY)
        if op == "not":
            return ("not", self._statement(rng, people, depth - 1))
        arity = rng.randint(2, self.width) if op in NARY else 2
        return (op,) + tuple(self._statement(rng, people, depth - 1) for _ in range(arity))

    def prompt(self, problem):
        if self.style == "compact":
            says = " ".join(f"{name}: {render_compact(s, problem.names)}."
                            for name, s in zip(problem.names, problem.statements))
            return f"{says}\nAnswer: "
        says = " ".join(f"{name} says: {render(s, problem.names)}." for name, s in zip(problem.names, problem.statements))
        return (f"Knights always tell the truth and knaves always lie. Inhabitants: {', '.join(problem.names)}. "
                f"{says} Who is a knight and who is a knave?\nAnswer: ")

    def canonical(self, problem):
        """The statements' truth tables in speaker order: names, wording and the shape of each
        formula drop out (a relabelling of the speakers is a different question: the answer is
        positional)."""
        people = len(problem.statements)
        return f"{people}:" + "/".join(truth_table(s, people) for s in problem.statements)

    def fields(self, problem):
        return {"names": list(problem.names), "statements": [as_lists(s) for s in problem.statements],
                "solution": ["knight" if k else "knave" for k in problem.solution]}

    def gold(self, problem):
        return " ".join(f"({i + 1}) {name} is a {'knight' if k else 'knave'}"
                        for i, (name, k) in enumerate(zip(problem.names, problem.solution)))

    def score(self, problem, completion):
        parsed = parse_answer(completion, problem.names)
        if isinstance(parsed, str):
            return Score(0.0, False, parsed)
        missing = [n for n in problem.names if n not in parsed]
        wrong = [n for n, k in zip(problem.names, problem.solution) if n in parsed and parsed[n] != k]
        if missing or wrong:
            why = "; ".join(x for x in (f"missing {', '.join(missing)}" if missing else "",
                                        f"wrong role for {', '.join(wrong)}" if wrong else "") if x)
            return Score(0.1, False, why)
        return Score(1.0, True, "correct")


# \b and the bounded name length keep matching linear on long runs of letters (model output).
_CLAUSE = re.compile(r"(?:\(\s*\d+\s*\)\s*)?\b([A-Za-z]{1,30})\s+is\s+an?\s+(knight|knave)\b", re.IGNORECASE)
_FILLER = re.compile(r"(?:[\s,;.]|\band\b)*", re.IGNORECASE)


def parse_answer(text: str, names: tuple[str, ...]) -> dict[str, bool] | str:
    """{name: is_knight} from an answer, or a one-line reason why it is malformed."""
    if len(text) > MAX_COMPLETION_CHARS:
        return "answer too long"
    canonical = {n.lower(): n for n in names}
    found: dict[str, bool] = {}
    pos = 0
    for m in _CLAUSE.finditer(text):
        if not _FILLER.fullmatch(text[pos:m.start()]):
            return f"unexpected text {text[pos:m.start()].strip()[:40]!r}"
        name = canonical.get(m.group(1).lower())
        if name is None:
            return f"unknown name {m.group(1)!r}"
        if name in found:
            return f"{name} named twice"
        found[name] = m.group(2).lower() == "knight"
        pos = m.end()
    if not found:
        return "no '<name> is a knight/knave' clause"
    if not _FILLER.fullmatch(text[pos:]):
        return f"unexpected text {text[pos:].strip()[:40]!r}"
    return found
