"""Fault injection with real processes and a real Reverb server.

One launcher run (learner hosting the Reverb server, evaluator and an actor
as processes) loses its actor, then its learner with the replay; each time
the run must go on from what was checkpointed. Then the run is interrupted
and the same command resumes it. A run whose Reverb server is a process of
its own loses that server and goes on. And an actor whose server never
comes back must give up in bounded time with a clear error.
"""
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time

import portpicker
import pytest
import tensorflow as tf

from actorq_tf import actor
from actorq_tf import model_channel
from actorq_tf import replay
from actorq_tf import run_directory
from conftest import PROJECT_ROOT
from conftest import TEST_BINDINGS
from helpers import launcher_running
from helpers import wait_for

TEST_GIN_ARGS = [arg for binding in TEST_BINDINGS
                 for arg in ('--gin_bindings', binding)]
FAST_CHECKPOINTS = [
    '--gin_bindings', 'ReplayService.checkpoint_interval_s = 5.0',
    '--gin_bindings', 'train.checkpoint_interval = 200',
]


def _status(root_dir, role):
  return (run_directory.read_status(root_dir, role) or
          run_directory.role_status_type(role)())


def _kill(root_dir, role):
  status = _status(root_dir, role)
  os.kill(status.pid, signal.SIGKILL)
  return status


def _restarted(root_dir, role, old_pid):
  return _status(root_dir, role).pid not in (0, old_pid)


def _checkpointed_train_step(root_dir):
  path = tf.train.latest_checkpoint(os.path.join(root_dir, 'checkpoints'))
  return int(path.rsplit('-', 1)[1]) if path else 0


def _wait_for_model_and_replay_checkpoint(root_dir):
  wait_for(lambda: _status(root_dir, 'actor_0').model_version > 0
           and _status(root_dir, 'reverb_server').last_checkpoint_items,
           240,
           'a model in the actor and a replay checkpoint')


def _goes_on(root_dir, actor, learner, what):
  wait_for(lambda: _status(root_dir, 'actor_0').env_steps >
           actor.env_steps + 500 and _status(root_dir, 'learner').train_step >
           learner.train_step + 200, 180, what)


def _interrupt(launcher, root_dir):
  """Ctrl-C: every role stops cleanly; returns the run's summary."""
  launcher.send_signal(signal.SIGINT)
  _, err = launcher.communicate(timeout=120)
  assert launcher.returncode == 0, err[-3000:]
  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'interrupted (SIGINT)'
  assert set(summary['exit_codes'].values()) == {0}
  return summary


def test_a_run_survives_killed_roles_and_resumes(tmp_path):
  # The default layout: the learner's process hosts the Reverb server.
  root_dir = str(tmp_path / 'run')
  with launcher_running(root_dir, '--max_env_steps', '0',
                        *FAST_CHECKPOINTS) as launcher:
    _wait_for_model_and_replay_checkpoint(root_dir)

    # The actor: restarted, it counts on from its last status and pulls a
    # valid model again.
    killed = _kill(root_dir, 'actor_0')
    wait_for(lambda: _restarted(root_dir, 'actor_0', killed.pid) and
             _status(root_dir, 'actor_0').env_steps > killed.env_steps
             + 500 and _status(root_dir, 'actor_0').model_version > 0,
             180, 'the restarted actor to collect with a model')

    # The learner, and the replay with it: restarted from their newest
    # checkpoints, not from step 0 and an empty table; the actor waits for
    # the server rather than die with it.
    wait_for(lambda: _checkpointed_train_step(root_dir) > 0 and _status(
        root_dir, 'reverb_server').last_checkpoint_items, 60,
             'a learner and a replay checkpoint')
    checkpointed_step = _checkpointed_train_step(root_dir)
    killed = _kill(root_dir, 'learner')
    replay = _status(root_dir, 'reverb_server')
    assert replay.pid == killed.pid
    actor = _status(root_dir, 'actor_0')
    wait_for(lambda: _restarted(root_dir, 'learner', killed.pid) and
             _status(root_dir, 'learner').train_step >
             _status(root_dir, 'learner').restored_train_step + 100, 180,
             'the restarted learner to train')
    assert (_status(root_dir, 'learner').restored_train_step >=
            checkpointed_step)
    assert (_status(root_dir, 'reverb_server').restored_items >=
            replay.last_checkpoint_items > 0)
    _goes_on(root_dir, actor, _status(root_dir, 'learner'),
             'env and train steps to go on after the restart')
    assert _status(root_dir, 'actor_0').pid == actor.pid
    summary = _interrupt(launcher, root_dir)
  assert summary['role_restarts'] == {'learner': 1, 'eval': 0, 'actor_0': 1}

  # The same command resumes the interrupted run where its final
  # checkpoints left it.
  final_train_step = _checkpointed_train_step(root_dir)
  final_replay_items = _status(root_dir, 'reverb_server').last_checkpoint_items
  env_steps = summary['env_steps']
  with launcher_running(root_dir, '--max_env_steps', str(env_steps + 1000),
                        *FAST_CHECKPOINTS) as launcher:
    _, err = launcher.communicate(timeout=300)
  assert launcher.returncode == 0, err[-3000:]
  with open(os.path.join(root_dir, 'summary.json')) as f:
    resumed = json.load(f)
  assert resumed['resumed']
  assert resumed['status'] == 'max_env_steps'
  assert [s['status'] for s in resumed['earlier_launches']] == [
      'interrupted (SIGINT)']
  assert resumed['env_steps'] >= env_steps + 1000
  assert (_status(root_dir, 'learner').restored_train_step ==
          final_train_step > 0)
  assert resumed['train_steps'] > final_train_step
  assert (_status(root_dir, 'reverb_server').restored_items >=
          final_replay_items > 0)


def test_a_reverb_server_of_its_own_restarts_under_its_clients(tmp_path):
  root_dir = str(tmp_path / 'run')
  with launcher_running(root_dir, '--max_env_steps', '0',
                        '--gin_bindings',
                        'run_training.replay_in_learner = False',
                        *FAST_CHECKPOINTS) as launcher:
    _wait_for_model_and_replay_checkpoint(root_dir)
    killed = _kill(root_dir, 'reverb_server')
    actor, learner = _status(root_dir, 'actor_0'), _status(root_dir, 'learner')
    assert learner.pid != killed.pid
    wait_for(lambda: _restarted(root_dir, 'reverb_server', killed.pid),
             120, 'the Reverb server to restart')
    restored = _status(root_dir, 'reverb_server').restored_items
    assert restored >= killed.last_checkpoint_items > 0
    _goes_on(root_dir, actor, learner,
             'env and train steps to go on after the restart')
    # Both waited for the server rather than dying with it.
    assert _status(root_dir, 'actor_0').pid == actor.pid
    assert _status(root_dir, 'learner').pid == learner.pid
    summary = _interrupt(launcher, root_dir)
  assert summary['role_restarts'] == {'reverb_server': 1, 'learner': 0,
                                      'eval': 0, 'actor_0': 0}


def _start(module, stderr_path, *args):
  # stderr goes to a file: an unread pipe fills and blocks the process.
  with open(stderr_path, 'w') as stderr:
    return subprocess.Popen(
        [sys.executable, '-m', module, *args], cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL, stderr=stderr, text=True,
        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))


def test_an_actor_whose_server_is_gone_for_good_gives_up_clearly(tmp_path):
  port = str(portpicker.pick_unused_port())
  actor_stderr = tmp_path / 'actor_stderr.txt'
  server_stderr = tmp_path / 'server_stderr.txt'
  server = _start('binaries.reverb_server_main', server_stderr,
                  '--replay_port', port, *TEST_GIN_ARGS)
  actor = None
  try:
    # The actor's own short server timeout is what this test measures; it
    # must not run out while the server is still importing TensorFlow.
    client = model_channel.wait_for_server(f'localhost:{port}', 120)
    actor = _start('binaries.actor_main', actor_stderr,
                   '--root_dir', str(tmp_path / 'run'),
                   '--replay_server_address', f'localhost:{port}',
                   '--gin_bindings', 'run_actor.server_timeout_s = 10',
                   *TEST_GIN_ARGS)

    def replay_size():
      return client.server_info(timeout=5)[replay.REPLAY_TABLE].current_size

    def actor_state():
      return (f'replay items: {replay_size()}\n'
              f'actor stderr:\n{actor_stderr.read_text()[-3000:]}\n'
              f'server stderr:\n{server_stderr.read_text()[-2000:]}')

    # Counted on the server, not in the actor's status: a fast actor can
    # fill the rate limiter's allowance (10,100 items, some 9,000 env steps
    # here) within its first status interval and then be held, status
    # unwritten, with no learner to sample.
    def collected():
      if actor.poll() is not None:
        raise AssertionError('the actor exited before collecting:\n' +
                             actor_state())
      return replay_size() > 200
    wait_for(collected, 120, 'the actor to collect', actor_state)
    server.kill()
    killed_at = time.monotonic()
    actor.wait(timeout=120)
    gave_up_after_s = time.monotonic() - killed_at
  finally:
    server.kill()
    if actor is not None:
      actor.kill()
  err = actor_stderr.read_text()
  assert actor.returncode == 1, err[-2000:]
  error_lines = [l for l in err.splitlines() if 'error:' in l]
  assert error_lines, err[-2000:]
  assert 'Reverb server at localhost:' + port in error_lines[-1]
  # The give-up time, plus one blocking call's timeout and a status check.
  assert 10 <= gave_up_after_s < 40


@contextlib.contextmanager
def _small_disk(path, size_mb):
  """A tmpfs of `size_mb` at `path`: a disk the test can fill."""
  os.makedirs(path)
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size_mb}m',
                            'tmpfs', str(path)], capture_output=True,
                           text=True, check=False)
  if mounted.returncode:
    pytest.skip(f'cannot mount a tmpfs to fill: {mounted.stderr.strip()}')
  try:
    yield str(path)
  finally:
    subprocess.run(['umount', '-l', str(path)], check=False)


def _fill(directory):
  try:
    with open(os.path.join(directory, 'filler'), 'wb', buffering=0) as f:
      while True:
        f.write(b'\0' * (1 << 16))
  except OSError as e:
    assert e.errno == errno.ENOSPC, e


def test_a_full_disk_stops_the_learner_with_one_line_and_keeps_its_checkpoints(
    cartpole_gin, tmp_path):  # pylint: disable=unused-argument
  with _small_disk(tmp_path / 'disk', 64) as disk:
    root_dir = os.path.join(disk, 'run')
    port = portpicker.pick_unused_port()
    command = [sys.executable, '-m', 'binaries.learner_main', '--root_dir',
               root_dir, '--replay_port', str(port), '--notrack_energy',
               *TEST_GIN_ARGS,
               '--gin_bindings', 'ReplayService.checkpoint_interval_s = 2.0',
               '--gin_bindings', 'train.checkpoint_interval = 100']

    def start_learner():
      return subprocess.Popen(command, cwd=PROJECT_ROOT, text=True,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=PROJECT_ROOT))

    learner = start_learner()
    try:
      address = f'localhost:{port}'
      # In the learner's run directory: it signs with the run's key.
      actor.run_actor(root_dir, address, max_env_steps=1500)
      wait_for(lambda: _checkpointed_train_step(root_dir) and (_status(
          root_dir, 'reverb_server').last_checkpoint_items or 0) >= 1000,
               120, 'a learner checkpoint and a replay checkpoint')
      _fill(disk)
      checkpointed_step = _checkpointed_train_step(root_dir)
      checkpointed_items = _status(root_dir,
                                   'reverb_server').last_checkpoint_items
      _, err = learner.communicate(timeout=120)
    finally:
      if learner.poll() is None:
        learner.kill()
    assert learner.returncode == 1, err[-3000:]
    assert 'Traceback' not in err, err[-3000:]
    message = err.strip().splitlines()[-1]
    assert re.match(r'learner_main.*: error: (the disk is full|could not '
                    r'checkpoint the replay).*No space left on device.*'
                    r'(checkpoints are|checkpoint is) kept$', message), message

    # Space again: the same command resumes from what was kept.
    os.remove(os.path.join(disk, 'filler'))
    learner = start_learner()
    try:
      wait_for(lambda: _status(root_dir, 'learner').pid == learner.pid,
               120, 'the learner to start again')
      server = _status(root_dir, 'reverb_server')
      assert server.restored_items >= checkpointed_items
      assert _status(root_dir, 'learner').restored_train_step >= (
          checkpointed_step)
    finally:
      learner.send_signal(signal.SIGTERM)
      learner.communicate(timeout=120)
