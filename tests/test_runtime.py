"""The runtime every role shares: stop, bounded waits, release, exit."""
import os
import subprocess
import sys
import threading

from actorq_tf import runtime
from conftest import PROJECT_ROOT


def _run_script(script: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, '-c', script], cwd=PROJECT_ROOT,
                        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
                        capture_output=True, text=True, timeout=120)


def test_a_loop_blocked_after_stop_is_finished_by_the_watchdog(tmp_path):
  """The runtime checkpoints and ends the process when the loop is stuck."""
  marker = tmp_path / 'finished'
  script = f'''
import threading, time
from actorq_tf import runtime
stop, lock, finished = threading.Event(), threading.Lock(), threading.Event()
def finish():
  open({str(marker)!r}, 'w').write('checkpointed')
  finished.set()
runtime.finish_if_stuck(stop, finished, lock, finish, 0.5)
stop.set()
time.sleep(60)  # A train loop blocked in replay sampling.
raise SystemExit(3)
'''
  result = _run_script(script)
  assert result.returncode == 0, result.stderr[-2000:]
  assert marker.read_text() == 'checkpointed'
  assert 'finishing from the watchdog' in result.stderr



def test_a_watchdog_without_beats_ends_the_process_saying_why():
  result = _run_script('''
import time
from actorq_tf import runtime
watchdog = runtime.Watchdog(1.0, 'waiting for the Reverb server at x:1')
for _ in range(3):
  time.sleep(0.5)
  watchdog.beat()  # Progress: it lets the process live.
time.sleep(60)  # Held in a call without a timeout.
''')
  assert result.returncode == 1
  assert ('no progress for 1 s while waiting for the Reverb server at x:1; '
          'giving up') in result.stderr


def test_sigterm_sets_the_stop_event():
  result = _run_script('''
import os, signal
from actorq_tf import runtime
stop = runtime.stop_on_signals()
os.kill(os.getpid(), signal.SIGTERM)
print('stopped' if stop.wait(10) else 'running')
''')
  assert result.stdout.strip() == 'stopped', result.stderr[-2000:]


def test_a_released_object_is_destroyed_off_the_callers_thread():
  destroyed_on = []
  done = threading.Event()

  class Blocking:
    def __del__(self):
      destroyed_on.append(threading.current_thread().name)
      done.set()

  holder = [Blocking()]
  runtime.release_off_thread(holder)
  assert not holder
  assert done.wait(10)
  assert destroyed_on == ['Release']


def test_tensorflow_imports_without_its_duplicate_registration_errors():
  script = 'from actorq_tf import runtime; runtime.import_tensorflow()'
  # Every log line asked for, in a process that imports TensorFlow while
  # the one below (the default level) does: two imports side by side.
  every_line = subprocess.Popen(
      [sys.executable, '-c', script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, PYTHONPATH=PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL='0'))
  try:
    default = _run_script(script)  # Warnings and errors only.
    _, every_line_stderr = every_line.communicate(timeout=120)
  finally:
    if every_line.poll() is None:
      every_line.kill()
      every_line.wait()
  assert every_line.returncode == 0, every_line_stderr[-2000:]
  assert 'Unable to register' not in every_line_stderr
  # TensorFlow's other start-up lines still come through when asked for.
  assert any(' I ' in line and '.cc:' in line
             for line in every_line_stderr.splitlines()), every_line_stderr
  assert (default.returncode, default.stderr) == (0, '')


def test_a_fatal_error_while_tensorflow_loads_still_reaches_stderr(tmp_path):
  # A stand-in for TensorFlow that logs like it and then aborts, as a wheel
  # built for instructions this CPU lacks does.
  fake = tmp_path / 'tensorflow'
  fake.mkdir()
  (fake / '__init__.py').write_text(
      'import os\n'
      'os.write(2, b"E cuda_dnn.cc:9261] Unable to register cuDNN factory: '
      'Attempting to register factory for plugin cuDNN when one has already '
      'been registered\\n")\n'
      'os.write(2, b"F cpu_feature_guard.cc:183] AVX512 not supported\\n")\n'
      'os.abort()\n')
  result = subprocess.run(
      [sys.executable, '-c',
       'from actorq_tf import runtime; runtime.import_tensorflow()'],
      cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
      env=dict(os.environ, PYTHONPATH=f'{tmp_path}:{PROJECT_ROOT}'))
  assert result.returncode != 0
  assert result.stderr == 'F cpu_feature_guard.cc:183] AVX512 not supported\n'


def test_a_config_sizes_the_tensorflow_thread_pools_of_a_process():
  script = '\n'.join([
      'from actorq_tf import config, runtime',
      'config.parse_gin(["dqn_cartpole.gin"], ["tensorflow_threads.inter_op '
      '= 3"])',
      'runtime.tensorflow_threads()',
      'import tensorflow as tf',
      'tf.constant(1.0) + 1.0',  # The pools exist from here on.
      'print(tf.config.threading.get_intra_op_parallelism_threads(),',
      '      tf.config.threading.get_inter_op_parallelism_threads())'])
  result = _run_script(script)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ['1', '3']
