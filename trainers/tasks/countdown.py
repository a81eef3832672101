"""`countdown`: reach a target from four numbers with + - * / and parentheses.

Problems: `count` numbers (default 4) drawn from 1..`max_number` (default 99) and a target
in 1..`max_target` (default 100) that a search over + - * / reaches; division only where
it is exact at that step (integers throughout). With `exactly_once=True` (the default,
as in Countdown-4) the answer must use every number exactly once; with False, each at most
once (a subset is fine). Targets are drawn from the values reachable under that rule.

Answer: an arithmetic expression, optionally followed by "= <target>". It is parsed with
Python's `ast` under a whitelist (integer literals, binary + - * /, parentheses) after a
character whitelist and a length cap: names, calls, attributes, strings, exponents, floor
division, unary operators and anything else are rejected without being evaluated. The
value is computed with exact fractions (so (8/3)*3 is 8).

Reward table:
- 1.0: the expression uses the numbers as required and equals the target (correct).
- 0.1: a valid expression over allowed numbers that misses the target, leaves a number
  unused (exactly_once), divides by zero, or whose "= N" disagrees with the target.
- 0.0: rejected: empty, too long, forbidden characters or syntax, a number not offered or
  used more often than offered (the reason names which).
"""
from __future__ import annotations

import ast
import random
import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from trainers.tasks.base import Score, Task, check_count

MAX_EXPRESSION_CHARS = 100  # four numbers and parentheses fit in ~30; more is not an answer
_ALLOWED_CHARS = re.compile(r"[0-9+\-*/() \t]*")
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


@dataclass(frozen=True)
class CountdownProblem:
    numbers: tuple[int, ...]
    target: int
    solution: str  # one expression reaching the target (the gold)


def reachable(numbers: tuple[int, ...], exactly_once: bool) -> dict[int, str]:
    """Every integer value reachable from `numbers` -> one expression for it (exact division)."""
    out: dict[int, str] = {}
    for value, expr in _combine(tuple((n, str(n)) for n in numbers), exactly_once):
        out.setdefault(value, expr)
    return out


def _combine(items: tuple[tuple[int, str], ...], exactly_once: bool):
    if len(items) == 1 or not exactly_once:
        yield from items
    for i in range(len(items)):
        for j in range(len(items)):
            if i == j:
                continue
            (a, ea), (b, eb) = items[i], items[j]
            rest = tuple(x for k, x in enumerate(items) if k not in (i, j))
            for value, expr in _pair(a, ea, b, eb, i < j):
                yield from _combine(rest + ((value, expr),), exactly_once)


def _pair(a, ea, b, eb, first):
    # + and * are commutative: take them once per unordered pair.
    wrap = lambda e: e if e.isdigit() else f"({e})"  # noqa: E731
    if first:
        yield a + b, f"{wrap(ea)}+{wrap(eb)}"
        yield a * b, f"{wrap(ea)}*{wrap(eb)}"
    yield a - b, f"{wrap(ea)}-{wrap(eb)}"
    if b != 0 and a % b == 0:
        yield a // b, f"{wrap(ea)}/{wrap(eb)}"


class Rejected(ValueError):
    """The answer is not a whitelisted expression; the message says why."""


def parse_expression(text: str) -> tuple[Fraction | None, list[int]]:
    """(value, integer literals used) of a whitelisted expression; value None on division by 0.

    Raises Rejected for anything outside the grammar. The text is never evaluated by Python:
    it is checked character by character, then parsed into a syntax tree that is walked here.
    """
    if len(text) > MAX_EXPRESSION_CHARS:
        raise Rejected(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    if not text.strip():
        raise Rejected("empty expression")
    if not _ALLOWED_CHARS.fullmatch(text):
        bad = sorted(set(c for c in text if not _ALLOWED_CHARS.fullmatch(c)))
        raise Rejected(f"forbidden characters {''.join(bad)[:20]!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise Rejected("not a valid expression") from None
    numbers: list[int] = []
    try:
        value = _walk(tree.body, numbers)
    except ZeroDivisionError:
        value = None
    return value, numbers


def _walk(node: ast.AST, numbers: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _walk(node.left, numbers), _walk(node.right, numbers)
        op = _OPS[type(node.op)]
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        return left / right  # Fraction: ZeroDivisionError on 0, caught by the caller
    if isinstance(node, ast.BinOp):
        raise Rejected(f"operator {type(node.op).__name__} not allowed")
    raise Rejected(f"{type(node).__name__} not allowed")


class Countdown(Task):
    """Combine the numbers with + - * / to hit the target."""

    unique_gold = False  # many expressions hit the target: P(the canonical one) is not the quality

    def __init__(self, count: int = 4, max_number: int = 99, max_target: int = 100, exactly_once: bool = True):
        if not (2 <= count <= 5):
            raise ValueError(f"countdown: count must be 2..5, got {count}")
        if not (1 <= max_number <= 10_000 and 1 <= max_target <= 100_000):
            raise ValueError(f"countdown: bad max_number {max_number} or max_target {max_target}")
        self.count, self.max_number, self.max_target = count, max_number, max_target
        self.exactly_once = bool(exactly_once)

    def options(self):
        return {"count": self.count, "max_number": self.max_number, "max_target": self.max_target,
                "exactly_once": self.exactly_once}

    def generate(self, n, seed):
        check_count(n)
        rng = random.Random(f"countdown:{seed}")
        return [self._one(rng) for _ in range(n)]

    def _one(self, rng: random.Random) -> CountdownProblem:
        while True:
            numbers = tuple(rng.randint(1, self.max_number) for _ in range(self.count))
            table = reachable(numbers, self.exactly_once)
            targets = sorted(v for v in table if 1 <= v <= self.max_target)
            if targets:
                target = rng.choice(targets)
                return CountdownProblem(numbers, target, table[target])

    def prompt(self, problem):
        rule = "each exactly once" if self.exactly_once else "each at most once"
        nums = ", ".join(map(str, problem.numbers))
        return f"Using the numbers {nums} ({rule}) with + - * / and parentheses, make {problem.target}.\nAnswer: "

    def canonical(self, problem):
        """The multiset of numbers and the target: the order the numbers are listed in is wording."""
        return f"{sorted(problem.numbers)}->{problem.target}"

    def gold(self, problem):
        return problem.solution

    def score(self, problem, completion):
        text = completion.strip()
        if len(text) > 2 * MAX_EXPRESSION_CHARS:
            return Score(0.0, False, "answer too long")
        claimed = None
        if "=" in text:
            text, _, rhs = text.partition("=")
            claimed = rhs.strip()
        try:
            value, used = parse_expression(text)
        except Rejected as e:
            return Score(0.0, False, str(e))
        extra = Counter(used) - Counter(problem.numbers)
        if extra:
            return Score(0.0, False, f"numbers not offered (or reused): {sorted(extra.elements())}")
        if self.exactly_once and Counter(used) != Counter(problem.numbers):
            return Score(0.1, False, "not every number used")
        if value is None:
            return Score(0.1, False, "division by zero")
        if claimed is not None and claimed != str(problem.target):
            return Score(0.1, False, f"'= {claimed[:20]}' is not the target")
        if value != problem.target:
            return Score(0.1, False, f"value {value} is not {problem.target}")
        return Score(1.0, True, "correct")
