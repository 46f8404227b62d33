"""conformance/plugin/scheduler.py: crash-and-replace sequences driven through xdist's scheduler API with fake
workers, as xdist's controller (DSession) drives it. Each sequence breaks pytest-xdist's own LoadGroupScheduling
(a KeyError or AssertionError in the controller, a stalled run, a crashed test run again: the proof that the test
can fail) and passes with ours: the run ends, every test but the crashed one runs exactly once, each group on one
worker. Pure Python, no worker processes: well under a second."""
from __future__ import annotations

import types

import pytest
from xdist.scheduler import LoadGroupScheduling, LoadScheduling, LoadScopeScheduling

from conformance.plugin import scheduler as ours

# 2 groups of 3 (one compile each) and 3 ungrouped tests, as --dist loadgroup sees them (`@group` suffixes)
IDS = ([f"s.py::test_plan[k-exact-{i}]@k-aaa" for i in range(3)] + [f"s.py::test_plan[k-exact-{i}]@k-bbb"
                                                                       for i in range(3, 6)]
       + [f"s.py::test_other[{i}]" for i in range(3)])


class Stall(Exception):
    """No worker can run a test and the scheduler does not say the run is finished: xdist would wait forever."""


class Node:
    """A fake xdist WorkerController: keeps what it was sent; runs a test only when it knows the next one or is shut
    down (xdist's remote.py holds its last test until then)."""

    def __init__(self, n: int):
        self.gateway = types.SimpleNamespace(id=f"gw{n}")
        self.shutting_down = False
        self.collection: list[str] = []
        self.queue: list[int] = []

    def send_runtest_some(self, indices):
        assert indices, f"{self.gateway.id}: empty runtests command (the worker would wait on it forever)"
        self.queue.extend(indices)

    def shutdown(self):
        self.shutting_down = True

    def can_run(self) -> bool:
        return len(self.queue) >= 2 or (self.shutting_down and bool(self.queue))

    def __repr__(self):
        return f"<Node {self.gateway.id}>"


class Controller:
    """What xdist's DSession does with its scheduler (dsession.py, 3.8.0), for the events these sequences need."""

    def __init__(self, cls, workers: int = 2):
        self.active: list[Node] = []
        dsession = types.SimpleNamespace(_active_nodes=self.active)
        self.config = types.SimpleNamespace(
            getvalue=lambda name: {"tx": [f"{workers}*popen"], "dist": "loadgroup"}[name],
            option=types.SimpleNamespace(loadscopereorder=False),
            hook=types.SimpleNamespace(pytest_collectreport=lambda report: None),
            pluginmanager=types.SimpleNamespace(get_plugin=lambda name: dsession if name == "dsession" else None))
        self.sched = cls(self.config)
        self.count = 0
        self.ran: list[tuple[str, str]] = []  # (worker, test id) in the order run
        self.crashed: list[str] = []  # the tests xdist reported as crashed (handle_crashitem)
        self.nodes = [self.start() for _ in range(workers)]

    def start(self) -> Node:
        node = Node(self.count)
        self.count += 1
        self.active.append(node)
        self.sched.add_node(node)  # worker_workerready
        return node

    def collect(self, node: Node, ids=IDS):  # worker_collectionfinish
        node.collection = list(ids)
        self.sched.add_node_collection(node, node.collection)
        if self.sched.collection_is_completed:
            self.sched.schedule()

    def run(self, node: Node) -> str:  # the worker runs its next test: worker_runtest_protocol_complete
        assert node.can_run(), node
        index = node.queue.pop(0)
        self.ran.append((node.gateway.id, node.collection[index]))
        self.sched.mark_test_complete(node, index)
        return node.collection[index]

    def crash(self, node: Node) -> Node:
        """The worker dies in its running test (worker_errordown); xdist starts a replacement, which the scheduler
        sees only once it is ready (add_node), and sends work once it has collected."""
        running = node.collection[node.queue[0]] if node.queue else None
        try:
            item = self.sched.remove_node(node)
        except KeyError:  # dsession.worker_errordown swallows this one
            item = None
        else:
            assert item == running, (item, running)
        if item:
            self.crashed.append(item)
        self.active.remove(node)
        return self.start()

    def finish(self):
        """Run until the scheduler says the run is finished, then shut every worker down and let it drain
        (worker_workerfinished asserts that a finishing worker had nothing left)."""
        while not self.sched.tests_finished:
            node = next((n for n in self.active if n.can_run()), None)
            if node is None:
                raise Stall(f"queue {list(self.sched.workqueue)}, queued {[(n, n.queue) for n in self.active]}")
            self.run(node)
        for node in list(self.active):
            node.shutdown()
            while node.queue:
                self.run(node)
            if node in self.sched.nodes:
                assert not self.sched.remove_node(node), node
            self.active.remove(node)

    def check(self):
        """Every test ran once (the crashed ones: never again), each group on one worker between crashes."""
        ids = [t for _, t in self.ran]
        assert sorted(ids + self.crashed) == sorted(IDS), (self.ran, self.crashed)
        for group in ("@k-aaa", "@k-bbb"):
            workers = [w for w, t in self.ran if t.endswith(group)]
            assert len(set(workers)) <= 1 + sum(t.endswith(group) for t in self.crashed), (group, self.ran)


def _two_crashes_one_still_collecting(c: Controller):
    """#1362: both workers crash; the first replacement collects while the second is still collecting."""
    c.collect(c.nodes[0])
    c.collect(c.nodes[1])
    c.run(c.nodes[0])
    r0 = c.crash(c.nodes[0])
    r1 = c.crash(c.nodes[1])
    c.collect(r0)  # xdist: schedule() indexes r1's collection, which does not exist yet
    c.collect(r1)


def _replacement_collects_differently(c: Controller):
    """#1189: the replacement's collection differs from the run's (here: another order)."""
    c.collect(c.nodes[0])
    c.collect(c.nodes[1])
    r = c.crash(c.nodes[0])
    c.collect(r, list(reversed(IDS)))  # xdist: not registered, then scheduled: KeyError


def _crash_after_a_finished_group(c: Controller):
    """#1323 / #1378: a worker that finished a whole group crashes; that group must not come back (empty)."""
    c.collect(c.nodes[0])
    c.collect(c.nodes[1])
    for _ in range(3):
        c.run(c.nodes[0])  # group aaa, all of it
    r = c.crash(c.nodes[0])
    c.collect(r)


def _crashed_test_not_rerun(c: Controller):
    """#1371: one worker crashes in the first test of a group; that test must not run again on the replacement."""
    c.collect(c.nodes[0])
    r = c.crash(c.nodes[0])
    c.collect(r)


def _replacement_gets_one_test(c: Controller):
    """#1327: the replacement's first work is a one-test group while more is queued: it must get a second test,
    since a worker holds its last test until it knows the next one."""
    c.collect(c.nodes[0])
    for _ in range(4):
        c.run(c.nodes[0])  # all of group aaa, the first of bbb
    r = c.crash(c.nodes[0])
    c.collect(r)


# name -> (sequence, workers, how xdist's LoadGroupScheduling fails it: exception, text in its message)
SEQUENCES = {"two_crashes_one_still_collecting": (_two_crashes_one_still_collecting, 2, KeyError, "gw3"),
             "replacement_collects_differently": (_replacement_collects_differently, 2, KeyError, "gw2"),
             "crash_after_a_finished_group": (_crash_after_a_finished_group, 2, AssertionError, "empty runtests"),
             "crashed_test_not_rerun": (_crashed_test_not_rerun, 1, AssertionError, "k-exact-0"),
             "replacement_gets_one_test": (_replacement_gets_one_test, 1, Stall, "queued")}


@pytest.mark.parametrize("cls", [ours.RecoveringLoadGroupScheduling, ours.RecoveringLoadScopeScheduling])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_ours_survives(name, cls):
    seq, workers, _, _ = SEQUENCES[name]
    c = Controller(cls, workers)
    seq(c)
    c.finish()
    c.check()


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_xdist_breaks(name):
    """The same sequence with xdist's own class: an error in the controller, a stall, or a crashed test run again
    (the test above can fail; if xdist fixes one, this says which and ours can shrink)."""
    seq, workers, error, text = SEQUENCES[name]
    c = Controller(LoadGroupScheduling, workers)
    with pytest.raises(error, match=text):
        seq(c)
        c.finish()
        c.check()


def test_crashed_group_stays_together_and_first():
    """The dead worker's unfinished group goes back whole, ahead of untouched groups, less the crashed test."""
    c = Controller(ours.RecoveringLoadGroupScheduling, 2)
    c.collect(c.nodes[0])
    c.collect(c.nodes[1])
    first = c.run(c.nodes[0])
    assert first.endswith("@k-aaa")
    r = c.crash(c.nodes[0])  # dies in the group's second test: the third goes back, alone, at the front
    assert list(c.sched.workqueue)[0] == "k-aaa" and list(c.sched.workqueue["k-aaa"]) == [IDS[2]]
    c.collect(r)
    c.finish()
    c.check()
    assert (r.gateway.id, IDS[2]) in c.ran and c.crashed == [IDS[1]]


def test_stranded_tests_end_the_run():
    """A replacement that collected none of the queued tests gets none and is shut down; the run ends (those tests
    are unreported: the conformance report is incomplete) instead of waiting on workers that cannot run them."""
    c = Controller(ours.RecoveringLoadGroupScheduling, 1)
    c.collect(c.nodes[0])
    r = c.crash(c.nodes[0])
    c.collect(r, [])  # a collection error in the replacement
    assert r.shutting_down and c.sched.tests_finished
    assert c.sched.workqueue  # left unrun, not pretended run


def test_make_scheduler_only_loadgroup_and_loadscope():
    def config(dist):
        return types.SimpleNamespace(getvalue=lambda name: {"tx": ["2*popen"], "dist": dist}[name])

    assert isinstance(ours.make_scheduler(config("loadgroup"), None), LoadGroupScheduling)
    assert isinstance(ours.make_scheduler(config("loadscope"), None), LoadScopeScheduling)
    for dist in ("load", "loadfile", "worksteal", "each", "no"):
        assert ours.make_scheduler(config(dist), None) is None, dist
    assert not issubclass(ours.RecoveringLoadGroupScheduling, LoadScheduling)
