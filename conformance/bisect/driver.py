"""The bisect itself: releases or commits in order, one replay per step, the answer printed and recorded.

`release_bisect(opts)`: the package's releases between --good and --bad, each installed into its scratch site
(`sites`), replayed (`replay`), binary-searched (`search`). `commit_bisect(opts)`: the commits of --repo that touch
--paths, each one's files placed over an installed release. `checkout_step(opts)`: one replay of the clone's checked
out files, for `git bisect run` (exit 0 / 1 / 125, never 2 once the options are valid). Bad input raises
InvalidInput before anything is installed (the case id, the versions, the folder or index, the repository).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.bisect import (
    EXIT_AMBIGUOUS,
    EXIT_FOUND,
    REPRO_FAIL,
    REPRO_PASS,
    REPRO_SKIP,
    commits,
    releases,
    replay,
    report,
    search,
    sites,
)
from references.errors import InvalidInput

REPLAY_MODES = ("subprocess", "in-process")
ABSENT_MARK = "is not registered"  # repro's SKIP line for a kernel no module registered at this release
# an adapter that could not import its library registers a gate-only `<library>_unavailable` kernel: the release is
# then not "without the kernel" but unjudgeable (a skip), e.g. a vLLM release whose dependencies differ from the site's
UNAVAILABLE_MARK = "_unavailable'"


@dataclass
class Options:
    case_id: str
    package: str
    good: str | None = None
    bad: str | None = None
    direction: str = "break"
    wheels: Path | None = None
    cache: str | None = None
    plugins: list = field(default_factory=list)
    repro_args: list = field(default_factory=list)
    replay: str = "subprocess"
    repo: Path | None = None
    paths: list = field(default_factory=list)
    over: str | None = None
    json_out: Path | None = None
    command: str = ""
    repeat: int = 1


def check_case_id(case_id: str):
    """The parsed id: a case or check id, or a compile id (`compile/<arch>/<program>/<case id>`, which `repro`
    recompiles: a compile failure bisects like a wrong answer). InvalidInput names the field and what is allowed."""
    from conformance.cases.check_ids import parse_id
    from conformance.compile.lane import ID_PREFIX, parse_compile_id

    if case_id.startswith(ID_PREFIX):
        return parse_compile_id(case_id)[2]
    return parse_id(case_id)


def check_repeat(value) -> int:
    """--repeat: a whole number of replays per step, at least 1."""
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if n < 1 or str(n) != str(value).strip():
        raise InvalidInput("--repeat", value, "a whole number of replays per step, at least 1")
    return n


def _replay_once(opts: Options, site: Path):
    if opts.replay == "in-process":
        return replay.run_in_process(opts.case_id, site, opts.plugins, opts.repro_args)
    return replay.run_subprocess(opts.case_id, site, opts.plugins, opts.repro_args)


def _step(opts: Options, site: Path):
    """One step: opts.repeat replays (each a fresh interpreter by default), combined by replay.combine: bad if any
    replay fails (a nondeterministic finding, such as a NaN that depends on the autotuner's pick, fails only in
    some), good only if every replay passes, else a skip."""
    if opts.repeat == 1:
        return _replay_once(opts, site)
    return replay.combine([_replay_once(opts, site) for _ in range(opts.repeat)])


def _answer(direction: str, verdict) -> str:
    """old / new / skip for the search: a break's old side passes, a fix's old side fails."""
    passed = verdict.passed
    if passed is None:
        return "skip"
    return "old" if passed == (direction == "break") else "new"


def _end_error(e: search.EndMismatch, labels: list[str], direction: str, case_id: str, what: str):
    field_ = "--bad" if (e.end == "new") == (direction == "break") else "--good"
    said = report.side_word(direction, e.answer)
    want = report.side_word(direction, e.end)
    if e.answer == "skip":
        return InvalidInput(field_, labels[e.index], f"a {what} on which the case can be judged (it cannot: "
                            f"{e.verdict.line}; exit {e.verdict.exit_code})")
    if want == "bad":
        return InvalidInput("ID", case_id, f"a case that fails on the bad {what} {labels[e.index]} (it passes "
                            f"there: {e.verdict.line})")
    return InvalidInput("ID", case_id, f"a case that passes on the good {what} {labels[e.index]} (it is {said} "
                        f"there too: {e.verdict.line}; the change lies outside --good..--bad)")


def _search(opts: Options, labels: list[str], site_of, out, label_key: str, what: str):
    """Binary-search the labelled items; returns (search.Result, step records, verdicts by index)."""
    verdicts, records = {}, []

    def judge(i):
        v = _step(opts, site_of(i))
        verdicts[i] = v
        answer = _answer(opts.direction, v)
        if i == 0 and opts.direction == "break" and answer == "skip" and ABSENT_MARK in v.line \
                and UNAVAILABLE_MARK not in v.line:
            # the good end has no such kernel yet: it cannot have the kernel's bug, so it is good (a bug born with
            # the kernel then bisects to the kernel's first release)
            v.line = f"absent, counted good: {v.line}"
            return "old", v
        return answer, v

    def on_step(i, answer, v):
        word = report.side_word(opts.direction, answer)
        records.append(report.step_record(label_key, labels[i], word, v))
        for line in report.step_lines(len(records), labels[i], word, v):
            out(line)

    try:
        res = search.bisect(len(labels), judge, on_step)
    except search.EndMismatch as e:
        raise _end_error(e, labels, opts.direction, opts.case_id, what) from None
    return res, records, verdicts


def release_bisect(opts: Options, out=print) -> tuple[int, dict]:
    start = time.perf_counter()
    check_case_id(opts.case_id)
    check_repeat(opts.repeat)
    if opts.replay not in REPLAY_MODES:
        raise InvalidInput("--replay", opts.replay, f"one of {list(REPLAY_MODES)}")
    all_releases = releases.list_releases(opts.package, opts.wheels)
    span = releases.span(all_releases, opts.good, opts.bad, opts.direction, opts.package)
    cache = sites.cache_dir(opts.cache)
    labels = [r.version for r in span]
    out(f"bisect: {opts.case_id} across {len(span)} releases of {opts.package} ({labels[0]} .. {labels[-1]}), "
        f"find the {'first failing' if opts.direction == 'break' else 'first passing'} release")
    site_cache = {}

    def site_of(i):
        if i not in site_cache:
            site_cache[i] = sites.install(sites.wheel_for(opts.package, span[i], cache), cache)
        return site_cache[i]

    res, records, verdicts = _search(opts, labels, site_of, out, "release", "release")
    old, new = report.ANSWER_WORDS[opts.direction]
    record = {"case_id": opts.case_id, "package": opts.package, "find": opts.direction, "good": opts.good,
              "bad": opts.bad, f"last_{old}": labels[res.last_old], f"first_{new}": labels[res.first_new],
              "steps": records}
    if res.ambiguous:
        record["candidates"] = [labels[i] for i in res.candidates]
    files = sorted(set(verdicts[res.last_old].files) | set(verdicts[res.first_new].files) | set(opts.paths))
    record["files"] = files
    out(f"last {old} release: {labels[res.last_old]}")
    if res.ambiguous:
        out(f"first {new} release: one of {', '.join(record['candidates'])} (the others could not be judged)")
    else:
        out(f"first {new} release: {labels[res.first_new]}")
    a, b = site_of(res.last_old), site_of(res.first_new)
    text = report.file_diff(a, b, files, f"{opts.package}-{labels[res.last_old]}",
                            f"{opts.package}-{labels[res.first_new]}")
    out(f"diff of the kernel's files ({', '.join(files) or 'none found: name them with --paths'}) between "
        f"{labels[res.last_old]} and {labels[res.first_new]}:" if text else
        f"the kernel's files ({', '.join(files) or 'none found: name them with --paths'}) are identical in "
        f"{labels[res.last_old]} and {labels[res.first_new]}: the change lies elsewhere in the package")
    if text:
        out(text.rstrip("\n"))
    return _finish(opts, record, res, start)


def _finish(opts: Options, record: dict, res, start: float) -> tuple[int, dict]:
    record["wall_s"] = round(time.perf_counter() - start, 1)
    if opts.command:
        record["command"] = opts.command
    if opts.json_out is not None:
        report.write_json(opts.json_out, record)
    return (EXIT_AMBIGUOUS if res.ambiguous else EXIT_FOUND), record


def _base_site(opts: Options, cache: Path) -> tuple[Path, str]:
    """The installed release the kernel files are placed over: --over VERSION (its scratch site), else the
    package as this Python imports it."""
    if opts.over is not None:
        rel = next((r for r in releases.from_folder(opts.package, opts.wheels) if r.version == opts.over), None) \
            if opts.wheels is not None else releases.Release(opts.over)
        if rel is None:
            raise InvalidInput("--over", opts.over, f"a release of {opts.package} with a wheel in {opts.wheels}")
        return sites.install(sites.wheel_for(opts.package, rel, cache), cache), opts.over
    return sites.installed_site(Path(opts.paths[0]).parts[0]), "installed"


def _check_paths(opts: Options) -> None:
    if not opts.paths:
        raise InvalidInput("--paths", "", "the kernel's files in the repository, comma-separated (e.g. "
                           "vllm/model_executor/kernels/linear/mixed_precision/triton_w4a16.py)")
    for p in opts.paths:
        if Path(p).is_absolute() or ".." in Path(p).parts:
            raise InvalidInput("--paths", p, "paths relative to the repository root, which are also the files' "
                               "paths in the installed package's site")


def commit_bisect(opts: Options, out=print) -> tuple[int, dict]:
    start = time.perf_counter()
    check_case_id(opts.case_id)
    check_repeat(opts.repeat)
    _check_paths(opts)
    repo = commits.check_repo(opts.repo)
    revs = commits.touching(repo, opts.good, opts.bad, opts.paths) if opts.direction == "break" else \
        commits.touching(repo, opts.bad, opts.good, opts.paths, "--bad", "--good")
    cache = sites.cache_dir(opts.cache)
    base, base_label = _base_site(opts, cache)
    labels = [r[:12] for r in revs]
    out(f"bisect: {opts.case_id} across {len(revs)} commits of {repo} touching {', '.join(opts.paths)} "
        f"({labels[0]} .. {labels[-1]}), over {opts.package} {base_label}")

    def site_of(i):
        return sites.overlay(base, commits.contents(repo, revs[i], opts.paths), cache, f"{opts.package}-{labels[i]}")

    res, records, _ = _search(opts, labels, site_of, out, "commit", "commit")
    old, new = report.ANSWER_WORDS[opts.direction]
    record = {"case_id": opts.case_id, "package": opts.package, "find": opts.direction, "good": opts.good,
              "bad": opts.bad, "over": base_label, "paths": opts.paths, f"last_{old}_commit": revs[res.last_old],
              f"first_{new}_commit": revs[res.first_new], "steps": records}
    if res.ambiguous:
        record["candidates"] = [revs[i] for i in res.candidates]
    out(f"last {old} commit: {commits.subject(repo, revs[res.last_old])}")
    if res.ambiguous:
        out(f"first {new} commit: one of {', '.join(labels[i] for i in res.candidates)}")
    else:
        out(f"first {new} commit: {revs[res.first_new]} ({commits.subject(repo, revs[res.first_new])})")
    text = commits.diff(repo, revs[res.last_old], revs[res.first_new], opts.paths)
    out(text.rstrip("\n") if text else "(no difference in --paths)")
    return _finish(opts, record, res, start)


def checkout_step(opts: Options, out=print) -> int:
    """Replay once with the clone's checked-out --paths over the base release: repro's 0 / 1, 125 otherwise."""
    check_case_id(opts.case_id)
    check_repeat(opts.repeat)
    _check_paths(opts)
    repo = commits.check_repo(opts.repo)
    cache = sites.cache_dir(opts.cache)
    base, base_label = _base_site(opts, cache)
    site = sites.overlay(base, commits.worktree_contents(repo, opts.paths), cache, f"{opts.package}-checkout")
    v = _step(opts, site)
    out(f"checkout of {repo} over {opts.package} {base_label}: exit {v.exit_code}: {v.line}")
    if v.metrics:
        out(f"metrics: {v.metrics}")
    passed = v.passed
    return REPRO_SKIP if passed is None else (REPRO_PASS if passed else REPRO_FAIL)
