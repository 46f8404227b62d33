"""Error profiles: save then compare passes; a slightly noisier kernel (still passing) fails compare, naming
the class."""
import pytest
from validation_kernels import NoisyDequantW4A16

from conformance import cli
from conformance.core import registry
from conformance.core.targets import CPU
from conformance.reports import error_profile


@pytest.fixture(scope="module")
def noisy():
    k = NoisyDequantW4A16()
    registry.register_kernel(k)
    yield k
    registry.unregister_kernel(k.name)


@pytest.fixture(scope="module")
def saved(noisy, tmp_path_factory):
    """`profile --save` once (each corpus run is ~84 cases): (path, profile); every test compares against it."""
    path = tmp_path_factory.mktemp("profile") / "p.json"
    assert cli.main(["profile", "--save", str(path), "--kernels", noisy.name, "--target", "cpu"]) == 0
    return path, error_profile.load(str(path))


def test_corpus_is_fixed_and_seeded():
    from conformance.cases import corpus

    a = [c.id for cls in corpus.classes("w4a16") for c in cls.cases("k")]
    b = [c.id for cls in corpus.classes("w4a16") for c in cls.cases("k")]
    assert a == b and len(set(a)) == len(a)


def test_save_then_compare_passes(saved, noisy, capsys):
    path, prof = saved
    classes = prof["kernels"][noisy.name]
    assert len(classes) == 28 and all(c["n_cases"] == 3 and not c["failures"] for c in classes.values())
    assert all(0 < c["p99_ratio"] <= c["max_ratio"] < 1 for c in classes.values())
    capsys.readouterr()
    assert cli.main(["profile", "--compare", str(path), "--kernels", noisy.name, "--target", "cpu"]) == 0
    assert "OK: 28 classes compared" in capsys.readouterr().out


def test_slightly_worse_kernel_fails_compare_and_names_class(saved, noisy, capsys, monkeypatch):
    path, prof = saved
    monkeypatch.setattr(noisy, "noise", 0.3)  # +0.3 tol on channelwise configs only: every case still passes
    now = error_profile.run_profile([noisy], CPU)
    assert all(not c["failures"] and c["max_ratio"] < 1 for c in now["kernels"][noisy.name].values())
    diff = error_profile.compare(prof, now)
    assert not diff.ok and diff.grew and not diff.failing
    grown = {r["class"] for r in diff.grew}
    assert all(" ch " in label for label in grown)  # only the noised (channelwise) classes are named
    text = error_profile.render_diff(diff)
    for label in grown:
        assert f"GREW {noisy.name} / {label}" in text
    # through the CLI: exit 1 and the class named. Its corpus run is the one above (test_save_then_compare_passes
    # runs the CLI's own): the CLI must hand this kernel and target to run_profile
    def run_profile(kernels, target):
        assert [k.name for k in kernels] == [noisy.name] and str(target) == "cpu", (kernels, target)
        return now

    monkeypatch.setattr(error_profile, "run_profile", run_profile)
    capsys.readouterr()
    assert cli.main(["profile", "--compare", str(path), "--kernels", noisy.name, "--target", "cpu"]) == 1
    out = capsys.readouterr().out
    assert f"GREW {noisy.name} / " in out and "CHANGED" in out


def test_missing_class_and_bad_file(saved, noisy, tmp_path):
    _, prof = saved
    now = {**prof, "kernels": {noisy.name: dict(list(prof["kernels"][noisy.name].items())[1:])}}
    diff = error_profile.compare(prof, now)
    assert not diff.ok and diff.missing == [f"{noisy.name} / {next(iter(prof['kernels'][noisy.name]))}"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert cli.main(["profile", "--compare", str(bad), "--kernels", noisy.name]) == 2
    assert cli.main(["profile", "--kernels", noisy.name]) == 2  # neither --save nor --compare
