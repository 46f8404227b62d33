"""Test plugin that calls sys.exit at import (tests/unit/test_bad_inputs.py): named in one line, never obeyed."""
import sys

sys.exit(3)
