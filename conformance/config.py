"""Plugin API v1 path, kept so plugins written against it keep working: this module IS
`conformance.families.config` (same object). New code imports from `conformance.api`."""
import sys

from conformance.families import config as _impl

sys.modules[__name__] = _impl
