"""The conformance pytest plugin's code, split by concern (loaded as `-p conformance.pytest_plugin`, which
re-exports the hooks and fixtures):

- options: the --conformance-* options, their validation, the values they resolve to;
- lifecycle: configure/unconfigure (kernel loading, markers, state, seed, time limit), the report header;
- collection: parametrization, the CI plan's items, hypothesis seeding, deselection;
- fixtures: the suite's fixtures;
- state: the run state, records attached to reports and merged on the controller, session start/end;
- report: the JSON report and what it summarizes;
- crash: crashed xdist workers and hangs Python cannot interrupt;
- summary: the terminal summary;
- heap: the garbage collector's permanent generation for what exists once the session started and collected.
- scheduler: our xdist scheduler for --dist loadgroup / loadscope, safe when a crashed worker is replaced
  (docs/faults.md);
- exit: a finished xdist worker or pytest command-line process leaves with os._exit, skipping the interpreter's
  finalization (with the exit status pytest would return);
- prewarm: on a GPU, xdist workers compile the run's Triton programs once each, split between them, before their
  first test (docs/ci.md);
- spawn: an xdist controller starts its workers before it loads torch and the kernels, when nothing it loads can
  refuse the run; the plugin's --dist choice.

Options: --conformance-kernels, --conformance-target, --conformance-tiers, --conformance-profile, --conformance-case,
--conformance-report, --conformance-plugin, --conformance-no-entry-points, --conformance-timeout, --conformance-seed,
--conformance-shard, --conformance-prewarm, --conformance-compile-targets (docs/ci.md);
--conformance-kernels and --conformance-case also deselect tests parametrized by another kernel (`kernel` /
`kernel_name` parameters). Every option is validated at configuration, before any work: a bad value (an unknown kernel,
an empty list, a bad target, profile, tier or case id, an unwritable report path, a plugin that fails to import) is
pytest's usage error (exit 4) with one line naming the option, the value and what is allowed. Tests ask for the
fixtures `conformance_kernel_name` (parametrized, sorted, over the kernels of the family named by the
`conformance_family("...")` marker), `conformance_tier` (parametrized over --conformance-tiers), `conformance_target`,
`conformance_profile` and `conformance_case` (the --conformance-case Case or None).

Run seed (conformance.cases.seeds): resolved once by the controller (--conformance-seed, $CONFORMANCE_SEED, the commit
for ci, random for nightly/exhaustive), handed to xdist workers, printed in the header and the summary and stored in
the JSON report. The suite's hypothesis tests draw from it (ci: with the ci example database); `conformance_plan_row`
is parametrized over the CI plan's rows (conformance.cases.plan, test ids `<kernel>-<tier>-<row>`), failed cases
of an earlier run first; the controller writes this run's failed plan cases for the next one at session end.

Time limit: every kernel call runs under conformance.checks.timeout (default per profile, PROFILE_LIMITS;
--conformance-timeout S overrides, 0 = none). A hung call fails its own case: an `error` record with detail
`timeout after N s`, its case id and replay line, and the test fails at once (hypothesis neither shrinks nor
replays it); the run goes on. A hang Python cannot interrupt ends its process after a grace period (an xdist
worker: the controller records the crash, with the case when the worker could name it).

Records (conformance.results) reach the controller with each test report: the plugin attaches the
records a test produced to its TestReport (pytest-xdist serializes report attributes), so a crashed
worker loses at most its running test's records, and the controller merges them in arrival order. Each report
also carries its worker's running count of records made; a worker that finishes reports its final count. The
JSON report's "produced" is the sum over processes plus the crash records the controller made, so a record lost
between a worker and the merged report shows as len(records) < produced. A crashed worker (os._exit, a segfault,
an uninterruptible hang) becomes an `error` record of the test's kernel with detail `worker crashed` (or
`timeout after N s` and the case id when the worker's watchdog named it), and the report lists the worker under
"crashed_workers".

--conformance-report is written atomically (temp file + rename) after each test (at most every
REPORT_INTERVAL_S seconds) with "complete": false, and at the end with "complete": true: a killed run keeps what
it judged.
"""
