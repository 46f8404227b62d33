"""The conformance pytest plugin, the module users load (`-p conformance.pytest_plugin`, the root conftest.py's
`pytest_plugins`): it re-exports the hooks and fixtures of conformance.plugin, where the code lives split by concern
(options, lifecycle, collection, fixtures, state, report, crash, summary; see that package's docstring), and keeps
the names other code imported from here importable."""
from __future__ import annotations

from conformance.plugin.collection import (  # noqa: F401
    KERNEL_PARAMS,
    MAX_GROUP_ITEMS,
    PlanItem,
    _deselect_other_kernels,
    _seed_hypothesis,
    _seeded,
    compile_groups,
    dist_for,
    item_kernel,
    kernel_names,
    plan_rows,
    pytest_cmdline_main,
    pytest_collection_modifyitems,
    pytest_generate_tests,
    pytest_runtest_setup,
    shard_of,
)
from conformance.plugin.crash import (  # noqa: F401
    _HANG_DIR_ENV,
    _hang_record,
    _item_kernel_check,
    _local_hang,
    _worker_hang,
    crashed_item,
    node_down,
)
from conformance.plugin.fixtures import (  # noqa: F401
    conformance_case,
    conformance_kernel,
    conformance_profile,
    conformance_target,
)
from conformance.plugin.lifecycle import (  # noqa: F401
    pytest_configure,
    pytest_report_header,
    pytest_unconfigure,
)
from conformance.plugin.options import (  # noqa: F401
    PROFILES,
    _check_options,
    _is_worker,
    _replay_case,
    _resolve_seed,
    _seed_option,
    _target,
    _tiers,
    _timeout_limit,
    _usage,
    pytest_addoption,
)
from conformance.plugin.report import (  # noqa: F401
    REPORT_INTERVAL_S,
    _write_if_asked,
    ledger,
    plan_summary,
    throughput,
    write_report,
)
from conformance.plugin.state import (  # noqa: F401
    _CONFIG_HOLDER,
    _PLAN_PROPERTY,
    _PRODUCED_KEY,
    _RECORDS_ATTR,
    _STATE_HOLDER,
    _note_plan,
    _note_throughput,
    _State,
    _worker_id,
    pytest_collection_finish,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_sessionstart,
)
from conformance.plugin.summary import (  # noqa: F401
    REAL_MODES,
    _class_label,
    _skip_reasons,
    _write_run_modes,
    pytest_terminal_summary,
    run_counts,
)
from conformance.plugin.xdist_hooks import XdistHooks, configure_node  # noqa: F401

# The xdist hooks' former names here, kept importable but not module attributes: pluggy registers every `pytest_*`
# attribute of a plugin module, and these must be registered only when xdist is active (XdistHooks).
_XDIST_HOOKS = {"pytest_configure_node": configure_node, "pytest_testnodedown": node_down,
                "pytest_handlecrashitem": crashed_item}


def __getattr__(name):
    if name in _XDIST_HOOKS:
        return _XDIST_HOOKS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
