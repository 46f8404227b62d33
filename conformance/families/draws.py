"""Hypothesis building blocks shared by the families' case strategies (row counts, seeds, N values)."""
from __future__ import annotations

from hypothesis import strategies as st

# M values that hit no block multiple: 1 (decode), odd, primes straddling common tiles 16/32/64/128
INTERESTING_M = (1, 3, 5, 7, 17, 33, 63, 65, 127, 129, 255, 257)


def m_values(m_max: int) -> st.SearchStrategy[int]:
    """Rows of x: 1, odd and prime values that are multiples of no block size, else any in [1, m_max]."""
    picks = [m for m in INTERESTING_M if m <= m_max]
    return st.one_of(st.sampled_from(picks), st.integers(1, max(1, m_max)))


def n_values(n_max: int) -> st.SearchStrategy[int]:
    """Output columns: multiples of 8 from 8 up to n_max (shrinks toward 8)."""
    return st.integers(1, max(1, n_max // 8)).map(lambda i: 8 * i)


def seeds() -> st.SearchStrategy[int]:
    """Data seeds (the only randomness of a case; shown in its id)."""
    return st.integers(0, 2 ** 31 - 1)
