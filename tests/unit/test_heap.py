"""conformance.plugin.heap: a process running under the plugin has frozen what existed once it collected, so
garbage collections scan only what the tests create; what the tests create is still collected."""
import gc
import weakref


def test_this_process_froze_its_startup_heap():
    # torch, triton, the collected items: some 200,000 objects here (a process without the plugin freezes none)
    assert gc.get_freeze_count() > 0, gc.get_freeze_count()


def test_garbage_made_by_a_test_is_still_collected():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
