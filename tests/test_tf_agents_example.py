"""examples/tf_agents_dqn.py, TF-Agents' distributed pattern with int8 actors,
run as a user runs it: three processes on one Reverb server."""
import os
import re
import signal
import subprocess
import sys

import portpicker
import pytest

from conftest import PROJECT_ROOT
from helpers import wait_for

EXAMPLE = os.path.join(PROJECT_ROOT, 'examples', 'tf_agents_dqn.py')


def _job(job, root_dir, port, log_path, *flags):
  log = open(log_path, 'w')  # pylint: disable=consider-using-with
  return subprocess.Popen(
      [sys.executable, EXAMPLE, f'--job={job}', f'--root_dir={root_dir}',
       f'--port={port}', f'--replay_server_address=localhost:{port}', *flags],
      stdout=log, stderr=subprocess.STDOUT, env=dict(
          os.environ, PYTHONPATH=PROJECT_ROOT))


def _stop(process):
  if process.poll() is None:
    process.send_signal(signal.SIGTERM)
    try:
      process.wait(30)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


@pytest.mark.end_to_end
def test_the_tf_agents_example_trains_with_int8_actors(tmp_path):
  port = portpicker.pick_unused_port()
  root_dir = tmp_path / 'run'
  logs = {job: tmp_path / f'{job}.log'
          for job in ('reverb_server', 'train', 'collect')}
  server = _job('reverb_server', root_dir, port, logs['reverb_server'])
  collect = train = None
  try:
    train = _job('train', root_dir, port, logs['train'],
                 '--num_iterations=400', '--export_interval=100')
    collect = _job('collect', root_dir, port, logs['collect'],
                   '--max_env_steps=1000000')
    train.wait(400)
    train_log = logs['train'].read_text()
    assert train.returncode == 0, train_log[-3000:]
    # Exports at steps 100-400 (one may be skipped while another runs).
    exported = re.search(r'train: 400 train steps, (\d+) int8 models '
                         r'exported, 0 replay items refused', train_log)
    assert exported and int(exported.group(1)) >= 2, train_log[-3000:]

    def progress():
      return re.findall(r'env steps (\d+), model version (\d+), random steps '
                        r'(\d+)', logs['collect'].read_text())

    wait_for(lambda: progress() and int(progress()[-1][1]) >= 100, 60,
             'the collect job to run a model',
             lambda: logs['collect'].read_text()[-3000:])
    lines = progress()
    first_with_model = next(i for i, (_, version, _) in enumerate(lines)
                            if int(version) > 0)
    random_steps = {int(random) for _, _, random in lines[first_with_model:]}
    # From its first model on, the model chose every step (with epsilon).
    assert len(random_steps) == 1, lines
    assert int(lines[-1][0]) > random_steps.pop()
  finally:
    for process in (collect, train, server):
      if process is not None:
        _stop(process)
