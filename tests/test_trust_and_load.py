"""Whole runs under a stranger's rows, a wrong key and many actors: only
the run's learner's models reach the actors, only the run's actors'
experience reaches the learner, and every actor keeps up."""
import hashlib
import json
import os
import re
import signal

import numpy as np
import pytest
import reverb
from tf_agents.trajectories import trajectory as trajectory_lib
from tf_agents.trajectories.time_step import StepType

from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import signing
from helpers import launcher_running
from helpers import start_launcher
from helpers import wait_for

FORGED_VERSION = 10_000_000


def _status(root_dir, role):
  return (run_directory.read_status(root_dir, role) or
          run_directory.role_status_type(role)())


def _served_by(root_dir):
  return f'localhost:{_status(root_dir, run_directory.SERVER_ROLE).port}'


def _insert_until_refused(root_dir, role, insert):
  """Inserts a row again and again (the learner's next one replaces it)
  until `role` says it refused it."""

  def refused():
    insert()
    return _status(root_dir, role).refused_versions >= 1

  wait_for(refused, 120, f'{role} to refuse the stranger\'s row',
           lambda: str(_status(root_dir, role)))


def _write_strangers_experience(client, key):
  """CartPole steps with all the right fields, as a second client could
  write them (held, as the run's actors are, by the rate limiter)."""
  writer = replay.ExperienceWriter(client, replay.sequence_length_of(client),
                                   key)
  for index in range(100):
    writer.write(trajectory_lib.Trajectory(
        step_type=np.int32(StepType.MID),
        observation=np.full(4, 0.01 * index, np.float32),
        action=np.int64(index % 2), policy_info=(),
        next_step_type=np.int32(StepType.MID), reward=np.float32(1.0),
        discount=np.float32(1.0)))
  writer.close()


def test_an_actor_given_another_key_is_refused_and_the_run_fails(tmp_path):
  # Its replay items do not verify with the run key: the learner trains on
  # none of them, and the run stops with the reason rather than wait.
  root_dir = str(tmp_path / 'run')
  wrong_key = signing.run_key(str(tmp_path / 'another_run')).source
  launcher = start_launcher(
      root_dir, '--max_env_steps', '0', '--max_wall_time_s', '300',
      '--gin_bindings', f'run_actor.model_key_file = {wrong_key!r}')
  out, err = launcher.communicate(timeout=400)
  assert launcher.returncode == 1, out[-2000:]
  message = err.strip().splitlines()[-1]
  assert re.match(r'local_main.*: error: the learner refused the last '
                  r'[\d,]+ replay items it read \(items that the run key '
                  r'does not sign.*\); the run stops rather than train on '
                  r'nothing. Do all actors have the run key\?$', message
                 ), message
  # The progress line said so before the stop.
  assert re.search(r'learner REFUSED [\d,]+ of [\d,]+ replay items', out), out
  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'failed'
  assert summary['error'] == message.split(': error: ', 1)[1]
  assert summary['train_steps'] == 0
  assert summary['replay_items_refused'] == summary['replay_items_checked']
  assert summary['replay_items_refused'] >= 10_000
  assert summary['actor_versions_run']['actor_0']['count'] == 0
  assert os.stat(os.path.join(root_dir, signing.KEY_FILE)).st_mode & 0o077 == 0
  for role in ('learner', 'actor_0'):  # the evaluator had nothing to do
    pid = _status(root_dir, role).pid
    with pytest.raises(ProcessLookupError):
      os.kill(pid, 0)


def test_eight_actors_refuse_a_strangers_rows_and_keep_up_with_the_learner(
    tmp_path):
  # Then an actor killed with restarts off ends the run (what a dying role
  # does then, tested here to spare the suite another run).
  root_dir = str(tmp_path / 'run')
  num_actors = 8
  with launcher_running(root_dir, '--num_actors', str(num_actors),
                        '--max_env_steps', '0', '--max_wall_time_s', '400',
                        '--norestart_failed_roles') as launcher:
    wait_for(lambda: _status(root_dir, 'actor_0').model_version, 120,
             'the actor\'s first model')
    client = reverb.Client(_served_by(root_dir))
    # A well-formed int8 CartPole model (the run's own bytes) with a valid
    # checksum for a signature, as a second client could send it.
    model_path = os.path.join(root_dir, run_directory.MODELS_DIR,
                              'policy_int8')
    model_bytes, normalizer, _ = export.load_kept_model(model_path)
    forged = model_channel.PublishedModel(
        FORGED_VERSION, 'int8', model_bytes, normalizer,
        signature=hashlib.sha256(model_bytes).hexdigest())
    _insert_until_refused(root_dir, 'actor_0', lambda: client.insert(
        forged.columns(),
        priorities={model_channel.model_table_name('int8'): 1.0}))
    refused_at = _status(root_dir, 'actor_0').model_version
    # fp32 variables for the evaluator, signed with another run's key.
    stranger_key = signing.run_key(str(tmp_path / 'another_run'))
    stranger = model_channel.ModelPublisher(client, stranger_key)
    weights = [w + np.ones_like(w) for w in
               export.kept_network_weights(model_path)]
    _insert_until_refused(root_dir, 'eval', lambda: stranger.publish_variables(
        weights, FORGED_VERSION))
    # Experience from outside the run, signed with the other run's key.
    _write_strangers_experience(client, stranger_key)
    wait_for(lambda: _status(root_dir, 'learner').replay_items_refused,
             120, 'the learner to refuse the stranger\'s replay items')
    wait_for(lambda: _status(root_dir, 'actor_0').model_version >
             refused_at and all(
                 len(_status(root_dir, f'actor_{i}').versions_run)
                 >= 3 for i in range(num_actors)), 120,
             'every actor to take three of the learner\'s versions')
    killed = _status(root_dir, 'actor_7')
    os.kill(killed.pid, signal.SIGKILL)
    out, err = launcher.communicate(timeout=120)
  assert launcher.returncode == 1, out[-2000:]
  assert 'role actor_7 exited with code -9 (restarts are off)' in err
  with open(os.path.join(root_dir, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['status'] == 'failed', out[-2000:]
  assert summary['actor_refused_versions']['actor_0'] == 1
  assert summary['eval_refused_versions'] >= 1
  assert re.search(r'actor_0 (REFUSED|refused) 1 (version|row)', out), out
  assert summary['replay_items_refused'] >= 1
  assert summary['replay_items_refused'] < 0.1 * summary['replay_items_checked']
  assert 'the run key does not sign' in summary['last_replay_refusal']
  assert re.search(r'learner REFUSED [\d,]+ of [\d,]+ replay items', out)
  results = run_directory.read_results(root_dir)
  assert results and all(r['version'] < FORGED_VERSION for r in results)
  actor_0 = _status(root_dir, 'actor_0')
  # It kept acting with the learner's models, and took its newer ones.
  assert actor_0.recent_model_share == 1.0, actor_0
  assert actor_0.model_version > refused_at
  assert 'does not verify with the run key' in actor_0.last_refusal
  published = _status(root_dir, 'learner').published_versions
  rates = []
  for i in range(num_actors):
    actor = _status(root_dir, f'actor_{i}')
    versions = summary['actor_versions_run'][f'actor_{i}']
    # Only the learner's versions, the stranger's refused by whoever saw it.
    assert versions['not_published_by_learner'] == []
    assert FORGED_VERSION not in actor.versions_run
    assert actor.refused_versions <= 1
    # Each actor keeps taking the learner's newer versions to the end: on
    # 2 cores with 10 roles, an actor pulls every few seconds and checks a
    # new model in a child process meanwhile, while the learner publishes
    # every second or two (exports every 100 train steps). The load
    # benchmark measures how far behind they run.
    assert versions['last'] >= published[-1] - 20 * 100, (
        i, versions, published[-6:])
    assert versions['count'] >= 3, (i, versions)
    rates.append(actor.env_steps_per_second if i == 7 else
                 actor.env_steps / actor.loop_seconds)
  # No actor starves: each gets a fair share of the two cores.
  assert min(rates) >= 0.3 * np.mean(rates), rates
  assert summary['replay_samples_per_insert_after_warmup'] == pytest.approx(
      summary['replay_samples_per_insert_configured'], rel=0.1)
  for role in ['learner', 'eval'] + [f'actor_{i}' for i in range(num_actors)]:
    with pytest.raises(ProcessLookupError):
      os.kill(_status(root_dir, role).pid, 0)
