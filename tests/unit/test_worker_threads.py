"""Worker thread share (conformance.plugin.threads): each test process gets max(1, cores // processes) threads for
torch, OpenMP and MKL; the controller exports the variables for its workers; the user's variables win. The
end-to-end check (real xdist workers, the JSON report, the header) is test_plugin's merge test."""
from types import SimpleNamespace

import pytest
import torch

from conformance.plugin import threads


def _config(workers: int | None, collectonly: bool = False):
    """A pytest config as the plugin reads it after xdist resolved -n (dist/tx), or a plain single-process run."""
    opt = SimpleNamespace(dist="load" if workers else "no", tx=["popen"] * (workers or 0), collectonly=collectonly)
    return SimpleNamespace(option=opt)


@pytest.mark.parametrize("workers, cores, share", [(16, 16, 1), (2, 2, 1), (4, 16, 4), (3, 16, 5), (8, 2, 1)])
def test_each_worker_gets_its_share_of_the_cores(workers, cores, share):
    info = threads.decide(_config(workers), environ={}, cores=cores)
    assert (info["workers"], info["share"], info["torch_threads"], info["export"]) == (workers, share, share, True)
    assert info["env"] == {v: {"value": str(share), "source": "plugin"} for v in threads.ENV_VARS}


def test_a_single_process_takes_every_core_and_exports_nothing():
    for config in (_config(None), _config(4, collectonly=True)):  # --collect-only distributes nothing
        info = threads.decide(config, environ={}, cores=6)
        assert (info["workers"], info["share"], info["torch_threads"], info["export"]) == (1, 6, 6, False)
    assert threads.header(info) == "conformance: 1 process x 6 threads (6 cores)"


def test_the_users_variable_wins_and_the_header_says_so():
    info = threads.decide(_config(2), environ={"OMP_NUM_THREADS": "3"}, cores=2)
    assert info["torch_threads"] is None  # the plugin sets no thread count
    assert info["env"]["OMP_NUM_THREADS"] == {"value": "3", "source": "environment"}
    assert threads.header(info) == ("conformance: 2 workers x 3 thread(s) (2 cores; OMP_NUM_THREADS=3 from the "
                                    "environment wins: the plugin sets no thread count)")
    env = {"OMP_NUM_THREADS": "3"}
    threads.apply(info, controller=True, environ=env)
    assert env == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "1"}  # the unset one is still the plugin's share


def test_header_line():
    info = threads.decide(_config(2), environ={}, cores=2)
    assert threads.header(info) == "conformance: 2 workers x 1 thread (2 cores)"


def test_apply_sets_torch_threads_and_exports_then_restore_undoes_it():
    before = torch.get_num_threads()
    want = 1 if before > 1 else 2
    info = dict(threads.decide(_config(2), environ={}, cores=2 * want))
    env = {"UNRELATED": "x"}
    undo = threads.apply(info, controller=True, environ=env)
    try:
        assert torch.get_num_threads() == want
        assert env == {"UNRELATED": "x", "OMP_NUM_THREADS": str(want), "MKL_NUM_THREADS": str(want)}
    finally:
        threads.restore(undo, environ=env)
    assert torch.get_num_threads() == before and env == {"UNRELATED": "x"}
    # a worker applies the controller's decision without exporting (it inherited the variables)
    env = {}
    undo = threads.apply(info, controller=False, environ=env)
    threads.restore(undo, environ=env)
    assert env == {} and torch.get_num_threads() == before
