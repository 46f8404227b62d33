"""An external kernel package in miniature: importing it registers `example_dequant_w4a16`.

Load it with CONFORMANCE_PLUGINS=example_plugin, `python -m conformance --plugin example_plugin ...`,
`pytest --conformance-plugin example_plugin`, or an entry point in group `conformance.kernels`
(see docs/plugins.md). It depends only on the public registry API and the reference codecs.
"""
from .kernel import ExampleDequantW4A16  # noqa: F401  (importing registers the kernel)
