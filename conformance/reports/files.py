"""Where the reports' files go: the checks and the plugin write files too, so the helpers live in
conformance.core.files; this name stays for the callers that have always imported it from here."""
from conformance.core.files import atomic_move, atomic_write_text, writable_dir, writable_file  # noqa: F401
