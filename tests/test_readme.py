"""The README's Python API snippet runs as it is shown."""
import os
import re
import subprocess
import sys

from conftest import PROJECT_ROOT


def _snippet(heading):
  with open(os.path.join(PROJECT_ROOT, 'README.md')) as f:
    readme = f.read()
  section = readme.split(heading, 1)[1]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def test_the_python_api_snippet_runs(tmp_path):
  code = _snippet('## Python API').replace("'/tmp/my_run'",
                                          repr(str(tmp_path / 'my_run')))
  # An in-process Reverb server whose sampler is held by the rate limiter
  # can keep the interpreter from exiting after the snippet has run (once
  # in three suite runs); the snippet's own asserts have run by then.
  code += '\nimport os\nos._exit(0)\n'
  result = subprocess.run([sys.executable, '-c', code], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
                          capture_output=True, text=True, timeout=400)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (tmp_path / 'my_run' / 'models' / 'policy_int8.tflite').exists()
