"""Plugin API v1 path, kept so plugins written against it keep working: this module IS
`conformance.core.runtime` (same object). New code imports from `conformance.api`."""
import sys

from conformance.core import runtime as _impl

sys.modules[__name__] = _impl
