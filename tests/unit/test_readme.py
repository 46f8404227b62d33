"""The README's runnable examples run: documentation that can rot is a test that can fail."""
import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python_blocks():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_references_example():
    blocks = _python_blocks()
    assert blocks and any("codecs.encode" in b and "reference_gemm" in b for b in blocks)


def test_readme_python_blocks_run(tmp_path):
    for i, block in enumerate(_python_blocks()):
        script = tmp_path / f"block{i}.py"
        script.write_text(block)
        runpy.run_path(str(script), run_name="__main__")


def test_quick_start_has_exactly_two_bash_blocks():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Quick start\s*$(.*?)(?=^## )", text, re.M | re.S)
    assert m, "README needs a '## Quick start' section"
    assert len(re.findall(r"```bash\n", m.group(1))) == 2
    assert (ROOT / ".ci" / "run").read_text().count("python -m pytest -n auto") == 1
