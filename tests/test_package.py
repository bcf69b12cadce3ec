"""What importing actorq_tf prints."""
import os
import subprocess
import sys

from conftest import PROJECT_ROOT


def _import_stderr(**environment):
  return subprocess.run(
      [sys.executable, '-c', 'import actorq_tf'], cwd=PROJECT_ROOT,
      capture_output=True, text=True, timeout=120, check=True,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT, **environment)).stderr


def test_tensorflows_duplicate_registration_errors_are_dropped_and_nothing_else():
  stderr = _import_stderr(TF_CPP_MIN_LOG_LEVEL='0')
  assert 'Unable to register' not in stderr
  # TensorFlow's other start-up lines still come through when asked for.
  assert any(' I ' in line and '.cc:' in line for line in stderr.splitlines()
            ), stderr
  assert _import_stderr() == ''  # Warnings and errors only, by default.
