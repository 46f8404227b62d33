"""Test plugin that calls os._exit at import (tests/unit/test_bad_inputs.py): named in one line, never obeyed."""
import os

os._exit(5)
