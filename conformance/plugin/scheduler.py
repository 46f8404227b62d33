"""Our xdist scheduler for `--dist loadgroup` (the plugin's default where kernels compile) and `--dist loadscope`:
xdist's own classes with the worker-crash path replaced, so that a worker a kernel ended (os._exit, SIGSEGV, a
sticky device error) is replaced, its unfinished cases run elsewhere, and the controller neither raises nor hangs.

Contract: every group (an `xdist_group`, or a loadscope scope) runs on one worker; when that worker dies, the test it
was running is reported failed by xdist (handle_crashitem: our crash record) and is not run again; the group's other
unfinished tests go back to the front of the queue as one unit, so one worker still compiles that specialization;
a replacement worker gets work as soon as it has collected; the run ends once every test ran or no live worker can
run what is left (then those tests are missing from the report, which says `complete: false`). Every other --dist
mode keeps xdist's scheduler (`make_scheduler` returns None for it).

What pytest-xdist 3.8.0's LoadScopeScheduling (which LoadGroupScheduling subclasses) does wrong here, and what
replaces it (the xdist issue numbers in the comments below):
- #1362/#1364: remove_node forgets the dead worker's work but not its collection, so `collection_is_completed`
  holds while its replacement is still collecting; the next collection to finish calls schedule(), which indexes
  the replacement's missing collection: KeyError, INTERNALERROR. Seen here: the fault matrix at -n 2, two workers
  crashed, the first replacement's collection scheduled the second (tests/unit/test_fault_matrix.py).
- #1189/#1299/#1348: a replacement whose collection differs from the first worker's is dropped without a word
  (its collection is not registered) and then scheduled all the same: KeyError. Ours registers it, says the
  difference in one line, and hands it only groups whose unfinished tests it collected (by node id, in its order).
- #1323/#1324, #1378/#1363: remove_node requeues the dead worker's completed groups too; each becomes an empty
  `runtests` command the worker never answers, so the run can stall at its end. Ours requeues unfinished tests only.
- #1327/#1328: a worker holds its last queued test until a next one (or shutdown) arrives, and a replacement got
  one group at a time: a one-test group stalled it. Ours tops a worker up to two pending tests, else shuts it down.
- #1371: the crashed test stays pending and reruns on the replacement (which it crashes again). Ours drops it, as
  xdist's LoadScheduling does: handle_crashitem has reported it failed.
"""
from __future__ import annotations

import sys

from xdist.scheduler import LoadGroupScheduling, LoadScopeScheduling

MIN_PENDING = 2  # a worker runs a test only once it knows the next (or is shut down): keep two queued (#1327)


class _Recovering:
    """The crash-and-replace path of LoadScopeScheduling, replaced (see the module doc); mixed in before it."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self._index: dict = {}  # node -> {node id: its index in that node's collection}
        self._stranded_said = False

    # ---- collections ----------------------------------------------------------------------------------------
    @property
    def collection_is_completed(self) -> bool:
        # once the first schedule() ran, a replacement's collection schedules at once; before, wait for every node
        # that is alive (a dead one no longer counts: #1362)
        return self.collection is not None or len(self.registered_collections) >= self.numnodes

    def add_node_collection(self, node, collection) -> None:
        """Register `node`'s collection; a replacement's that differs is kept (each node is sent indices into its
        own list) and named in one line (#1189: xdist dropped it and then scheduled the node anyway)."""
        assert node in self.assigned_work, f"add_node_collection: {node} was never added"
        collection = list(collection)
        if self.collection is not None and collection != self.collection:
            _say(_diff_line(self.collection, collection, node))
        self.registered_collections[node] = collection
        self._index[node] = {nid: i for i, nid in enumerate(collection)}

    # ---- a node's end -----------------------------------------------------------------------------------------
    def remove_node(self, node) -> str | None:
        """Forget `node` (its work and its collection: #1362); a dead node's unfinished groups, less the test it
        died in (#1371) and less every finished test and group (#1323, #1378), return to the front of the queue,
        each whole; return that test, or None when the node had nothing pending."""
        workload = self.assigned_work.pop(node)
        self.registered_collections.pop(node, None)
        self._index.pop(node, None)
        left = [(scope, {nid: False for nid, done in unit.items() if not done}) for scope, unit in workload.items()]
        left = [(scope, unit) for scope, unit in left if unit]
        if not left:
            return None
        crashitem = next(iter(left[0][1]))  # a worker runs its tests in the order sent: the first pending one
        del left[0][1][crashitem]
        for scope, unit in reversed(left):
            if unit:
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)
        for other in self.nodes:
            self._reschedule(other)
        return crashitem

    # ---- handing out work -------------------------------------------------------------------------------------
    def _runnable(self, node, unit: dict) -> bool:
        index = self._index.get(node)
        return index is not None and all(nid in index for nid, done in unit.items() if not done)

    def _assign_work_unit(self, node, scope: str | None = None) -> None:
        """Send `node` the unfinished tests of group `scope` (default: the first group it can run)."""
        if scope is None:
            scope = next(s for s, unit in self.workqueue.items() if self._runnable(node, unit))
        unit = self.workqueue.pop(scope)
        self.assigned_work[node][scope] = unit
        index = self._index[node]
        todo = [index[nid] for nid, done in unit.items() if not done]
        if not todo:  # never an empty runtests command: the worker would wait on it (#1323)
            raise RuntimeError(f"scheduler: group {scope!r} has no unfinished test to send to {node.gateway.id}")
        node.send_runtest_some(todo)

    def _reschedule(self, node) -> None:
        """Top `node` up to MIN_PENDING tests from the groups it can run; shut it down when it can run none of
        what is queued. A node still collecting waits (#1362, #1189: xdist indexed its missing collection)."""
        if node.shutting_down or node not in self.registered_collections:
            return
        if self._pending_of(self.assigned_work[node]) > MIN_PENDING:
            return
        while True:
            scope = next((s for s, unit in self.workqueue.items() if self._runnable(node, unit)), None)
            if scope is None:
                node.shutdown()
                return
            self._assign_work_unit(node, scope)
            if self._pending_of(self.assigned_work[node]) >= MIN_PENDING:
                return

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed:
            return False
        if any(self._pending_of(unit) >= MIN_PENDING for unit in self.assigned_work.values()):
            return False
        return not self.workqueue or self._stranded()

    def _stranded(self) -> bool:
        """True when what is queued can never run: every live worker (xdist's, a replacement on its way included)
        has collected and none that is not shutting down collected those tests. They go unreported (the
        conformance report is then incomplete); said once."""
        live = _live_nodes(self.config)
        if live is None or any(n not in self.registered_collections for n in live):
            return False
        if any(not n.shutting_down and self._runnable(n, unit) for n in live for unit in self.workqueue.values()):
            return False
        if not self._stranded_said:
            self._stranded_said = True
            ids = [nid for unit in self.workqueue.values() for nid, done in unit.items() if not done]
            _say(f"conformance: scheduler: {len(ids)} tests left unrun: no live worker collected them "
                 f"(first: {ids[:3]})")
        return True


class RecoveringLoadGroupScheduling(_Recovering, LoadGroupScheduling):
    """`--dist loadgroup`, crash-and-replace safe."""


class RecoveringLoadScopeScheduling(_Recovering, LoadScopeScheduling):
    """`--dist loadscope`, crash-and-replace safe."""


def make_scheduler(config, log):
    """pytest_xdist_make_scheduler: ours for loadgroup / loadscope, None (xdist's own) for every other mode."""
    dist = config.getvalue("dist")
    if dist == "loadgroup":
        return RecoveringLoadGroupScheduling(config, log)
    if dist == "loadscope":
        return RecoveringLoadScopeScheduling(config, log)
    return None


def _live_nodes(config):
    """The controller's live workers, replacements still starting included (xdist's DSession; None if unknown)."""
    session = config.pluginmanager.get_plugin("dsession")
    nodes = getattr(session, "_active_nodes", None)
    return None if nodes is None else list(nodes)


def _diff_line(first: list, other: list, node) -> str:
    a, b = set(first), set(other)
    gone, new = [x for x in first if x not in b], [x for x in other if x not in a]
    how = f"{len(gone)} missing, {len(new)} extra" if gone or new else "same tests in another order"
    return (f"conformance: scheduler: replacement worker {node.gateway.id} collected {len(other)} tests, the run "
            f"{len(first)} ({how}; missing {gone[:2]}, extra {new[:2]}): it runs only groups it collected")


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()

