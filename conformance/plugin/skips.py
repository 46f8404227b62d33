"""Readable skips: each skip reason pytest prints (its short summary, the plugin's warnings) is one line of at most
SKIP_LIMIT characters; a longer one (a gate's refusal repeated for every target and case) is cut after whole
clauses and says how many it left out. The full reason of every skipped test goes to the JSON report ("skipped":
[{"test", "reason"}]), where nothing is cut."""
from __future__ import annotations

SKIP_LIMIT = 200
FULL_ATTR = "conformance_skip_reason"  # report attribute: the full reason (xdist carries it to the controller)
MORE = " (+{n} more; full text in the JSON report)"


def short_reason(text: str, limit: int = SKIP_LIMIT) -> str:
    """`text` on one line, at most `limit` characters: unchanged when it fits; else its leading '; '-separated
    clauses that fit (each once), then "(+N more; full text in the JSON report)", N the clauses not shown (repeats
    included); a first clause that alone is too long is cut with '...'."""
    one = " ".join(str(text).split())
    if len(one) <= limit:
        return one
    clauses = [c for c in (c.strip() for c in one.split("; ")) if c]
    kept: list[str] = []
    for c in dict.fromkeys(clauses):  # in order, each clause once: a refusal repeated per target is shown once
        if len("; ".join([*kept, c])) + len(MORE.format(n=len(clauses) - len(kept) - 1)) > limit:
            break
        kept.append(c)
    if kept:
        return "; ".join(kept) + MORE.format(n=len(clauses) - len(kept))
    tail = MORE.format(n=len(clauses) - 1) if len(clauses) > 1 else " (full text in the JSON report)"
    return clauses[0][:limit - len(tail) - 3].rstrip() + "..." + tail


def shorten(rep) -> None:
    """A skipped test's report: keep the full reason on the report (FULL_ATTR) and show the short one."""
    lr = rep.longrepr
    if not (rep.skipped and isinstance(lr, tuple) and len(lr) == 3 and isinstance(lr[2], str)):
        return
    setattr(rep, FULL_ATTR, lr[2])
    short = short_reason(lr[2])
    if short != lr[2]:
        rep.longrepr = (lr[0], lr[1], short)


def full_reason(rep) -> str | None:
    """The full skip reason of a skipped test's report (controller side), None for a report that did not skip."""
    if not rep.skipped:
        return None
    full = getattr(rep, FULL_ATTR, None)
    if full is not None:
        return full
    lr = rep.longrepr
    return lr[2] if isinstance(lr, (tuple, list)) and len(lr) == 3 else str(lr)
