"""The report and its parts, measured on the library's own code paths."""
from actorq_tf import runtime

# Before any benchmark module imports TensorFlow, as binaries do: its
# duplicate-registration errors would open every benchmark's output.
runtime.import_tensorflow()
