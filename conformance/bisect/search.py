"""The binary search: over items ordered from an `old` end to a `new` end, find the first `new` item.

`judge(item)` answers "old", "new" or "skip" (as `git bisect` reads exit 125). Both ends are judged first (the new
end first): an end that does not answer as its side is bad input, reported by the caller (`EndMismatch`). Then the
untested item nearest the middle of the open interval (last old, first new) is judged until no untested item
lies between them; skipped items are stepped around, and when only skipped items remain between the two, the
answer is the set of candidates (`git bisect`'s "only 'skip'ped commits left"): those items and the first new.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class EndMismatch(Exception):
    """An end of the range did not answer as its side: `end` is "old" or "new", `answer` what it said."""

    end: str
    index: int
    answer: str
    verdict: object = None


@dataclass
class Result:
    """last_old / first_new: indices into the items; candidates: the possible first-new indices when skipped items
    hide the boundary (else [first_new]); steps: (index, answer, verdict) in the order judged."""

    last_old: int
    first_new: int
    candidates: list[int]
    steps: list = field(default_factory=list)

    @property
    def ambiguous(self) -> bool:
        return len(self.candidates) > 1


def bisect(n: int, judge: Callable[[int], tuple[str, object]], on_step: Callable | None = None) -> Result:
    """Search items 0..n-1 (0 is the old end, n-1 the new end); `judge(i)` returns (answer, verdict)."""
    if n < 2:
        raise ValueError(f"n={n}: a search needs two ends")
    steps = []

    def ask(i):
        answer, verdict = judge(i)
        steps.append((i, answer, verdict))
        if on_step is not None:
            on_step(i, answer, verdict)
        return answer, verdict

    for end, i in (("new", n - 1), ("old", 0)):
        answer, verdict = ask(i)
        if answer != end:
            raise EndMismatch(end, i, answer, verdict)
    lo, hi, skipped = 0, n - 1, set()
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untested:
            break
        mid = (lo + hi) / 2
        i = min(untested, key=lambda k: (abs(k - mid), k))
        answer, _ = ask(i)
        if answer == "old":
            lo = i
        elif answer == "new":
            hi = i
        else:
            skipped.add(i)
    return Result(lo, hi, [i for i in range(lo + 1, hi) if i in skipped] + [hi], steps)
