"""harness._execution on a GPU host for a simulated target: the model by default, the real code on this device for a
kernel that declares `simulated_on_device` (its Triton code runs on any backend; the vLLM adapter's Triton routes),
the model again where that kernel's own per-call dispatch says so (the hybrid's HIP GEMV)."""
import pytest

from conformance.checks import harness
from conformance.core.kernel import Kernel
from conformance.core.targets import parse_target

H200 = parse_target("sm90")
GFX1100 = parse_target("gfx1100")


class _Portable(Kernel):
    name, family, has_model = "portable_test_kernel", "w4a16", True

    def can_implement(self, config, target):
        return None

    def availability(self, target):  # runs on this (CUDA) machine only, as the vLLM adapter says
        return None if target == H200 else f"target={target} is not this machine's device"

    def run_mode_for(self, M, K, target):
        return "model" if M <= 5 else self.run_mode(target)  # a GEMV route whose op is absent: the model


class _OptedIn(_Portable):
    simulated_on_device = True


@pytest.fixture(autouse=True)
def gpu_host(monkeypatch):
    monkeypatch.setattr(harness, "detect_target", lambda: H200)


def test_default_is_the_model_for_a_simulated_target():
    mode, why = harness._execution(_Portable(), GFX1100, 64, 256)
    assert mode == "model" and "gfx1100" in why


def test_opted_in_kernel_runs_its_real_code_on_this_device():
    assert harness._execution(_OptedIn(), GFX1100, 64, 256) == ("device", "")
    assert harness._execution(_OptedIn(), GFX1100)[0] == "device"
    assert harness._execution(_OptedIn(), GFX1100, 1, 256)[0] == "model"  # its own dispatch still decides per call
    assert harness._execution(_OptedIn(), H200, 64, 256) == ("device", "")  # the machine's own target: unchanged


def test_opted_in_kernel_that_cannot_run_here_is_the_model():
    class Absent(_OptedIn):
        def availability(self, target):
            return "op not built"

    mode, why = harness._execution(Absent(), GFX1100, 64, 256)
    assert mode == "model" and why == "op not built"
