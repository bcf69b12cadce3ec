"""Trial-loads model bytes from the network in a throwaway process.

TF 2.15's TFLite interpreter does not verify the flatbuffer it is given:
a model cut short or with a few bytes changed crashed the process that
loaded it (segfault) in our tests. Reverb has no authentication, so an
actor cannot trust that bytes with a matching checksum came from the
learner. Each new model is therefore first loaded, allocated and run once in
a child process that imports only the interpreter extension of the
runtime the actor runs models in (interpreter.runtime(); about 0.2 s); only
bytes that survive that reach the actor's own interpreter.

Run as a script, this file is that child: model bytes on stdin, the path
of the interpreter extension as its argument, exit code 0 if the model ran.
"""
import importlib.util
import os
import signal
import subprocess
import sys

import gin

_BUILTIN_OP_RESOLVER = 1  # OpResolverType.BUILTIN
# The interpreter extension of each runtime (see interpreter.runtime), and
# the arguments its CreateWrapperFromBuffer takes after the model and the op
# resolver: custom op registerers by name and by function, then flags and
# the thread count.
_WRAPPERS = {
    'tensorflow': ('tensorflow.lite.python.interpreter_wrapper',
                   '_pywrap_tensorflow_interpreter_wrapper',
                   ([], [], False, False)),
    'litert': ('ai_edge_litert', '_pywrap_litert_interpreter_wrapper',
               ([], [], False, False, 1, False, False, False, False)),
}


def _wrapper_path(runtime: str) -> str:
  package, module, _ = _WRAPPERS[runtime]
  directory = os.path.dirname(importlib.util.find_spec(package).origin)
  return os.path.join(directory, f'{module}.so')


@gin.configurable
def trial_load(model_bytes: bytes, timeout_s: float = 30.0) -> None:
  """Raises ActorQError unless the bytes load and run in a child process.

  A 2048x2048x2048 model (34 MB in fp32) takes about 0.4 s here.
  """
  # pylint: disable=g-import-not-at-top
  from actorq_tf import interpreter
  from actorq_tf.errors import ActorQError
  # pylint: enable=g-import-not-at-top
  runtime = interpreter.runtime()
  try:
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), runtime,
         _wrapper_path(runtime)],
        input=model_bytes, capture_output=True, timeout=timeout_s,
        check=False)
  except subprocess.TimeoutExpired as e:
    raise ActorQError(f'model did not load and run within {timeout_s:g} s '
                      'in a trial process') from e
  if child.returncode < 0:
    raise ActorQError('model crashes the TFLite interpreter (trial process '
                      f'ended by {signal.Signals(-child.returncode).name})')
  if child.returncode != 0:
    lines = child.stderr.decode(errors='replace').strip().splitlines()
    raise ActorQError('model does not load in TFLite: ' +
                      (lines[-1] if lines else f'exit {child.returncode}'))


def _load_and_run_once() -> None:
  # Loading the extension by path skips tensorflow/__init__.py (seconds).
  import numpy  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  _, module, arguments = _WRAPPERS[sys.argv[1]]
  spec = importlib.util.spec_from_file_location(module, sys.argv[2])
  wrapper = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(wrapper)
  # The interpreter reads the model from this buffer and does not own it:
  # `model_bytes` must outlive it (dropped, models over about 1 MB crashed
  # the child on every load, so every paper-size model was refused).
  model_bytes = sys.stdin.buffer.read()
  interpreter = wrapper.CreateWrapperFromBuffer(
      model_bytes, _BUILTIN_OP_RESOLVER, *arguments)
  interpreter.AllocateTensors()
  interpreter.Invoke()
  del interpreter
  del model_bytes


if __name__ == '__main__':
  _load_and_run_once()
