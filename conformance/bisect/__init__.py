"""Bisect a case across a kernel library's releases or commits (`python -m conformance bisect`).

Modules, each owning one thing:

- `releases`: which releases of a package lie between two versions (the package index through pip, or a folder
  of wheels), in version order, and the bad-input checks on the two versions;
- `sites`: a release's wheel (downloaded once) installed with no dependencies into a scratch site of its own,
  cached between runs; a commit's kernel files placed over an installed release (an overlay site);
- `commits`: the commits of a local clone that touch the kernel files, and their contents;
- `replay`: one step: the case id replayed with a scratch site first on the path (in a fresh process, or in this
  one for pure-Python packages), its exit code, verdict line and metrics, and the kernel's files in that site;
- `search`: the binary search over an ordered list with `git bisect`'s skip rule;
- `report`: the printed steps, the answer and the diff of the kernel's files, and the JSON record.

Exit codes of the command: 0 the boundary is named, 1 skipped steps leave it between several candidates (they
are listed), 2 bad input (one line naming the field, the value and what is allowed).
"""
from __future__ import annotations

EXIT_FOUND, EXIT_AMBIGUOUS, EXIT_USAGE = 0, 1, 2
# repro's exit codes (conformance.cli.repro), read by every step
REPRO_PASS, REPRO_FAIL, REPRO_SKIP = 0, 1, 125
