"""Bad input: one clear line and a non-zero exit, nothing left half-made."""
import json
import os

from conftest import run_binary


def _error_line(result):
  lines = [l for l in result.stderr.splitlines() if 'error:' in l]
  assert lines, result.stderr[-2000:]
  return lines[-1]


def test_unknown_environment(tmp_path):
  root_dir = tmp_path / 'run'
  result = run_binary('binaries.local_main', '--root_dir', str(root_dir),
                      '--gin_bindings', "load_environment.env_name = 'Nope-v0'")
  assert result.returncode == 1
  assert "unknown environment 'Nope-v0'" in _error_line(result)
  assert 'Traceback' not in result.stderr
  assert not root_dir.exists()


def test_dqn_on_a_continuous_environment(tmp_path):
  result = run_binary('binaries.local_main', '--root_dir', str(tmp_path),
                      '--gin_bindings',
                      "load_environment.env_name = 'Pendulum-v1'")
  assert result.returncode == 1
  assert 'DQN needs one discrete action' in _error_line(result)


def test_d4pg_on_a_discrete_environment(tmp_path):
  root_dir = tmp_path / 'run'
  result = run_binary('binaries.local_main', '--root_dir', str(root_dir),
                      '--gin_file', 'd4pg_pendulum.gin', '--gin_bindings',
                      "load_environment.env_name = 'CartPole-v1'")
  assert result.returncode == 1
  assert 'D4PG needs a bounded vector of continuous actions' in _error_line(
      result)
  assert not root_dir.exists()


def test_unknown_control_suite_task(tmp_path):
  result = run_binary('binaries.learner_main', '--root_dir', str(tmp_path),
                      '--gin_file', 'd4pg_cartpole_balance.gin',
                      '--gin_bindings',
                      "load_environment.env_name = 'cartpole-juggle'")
  assert result.returncode == 1
  assert "unknown environment 'cartpole-juggle'" in _error_line(result)
  assert 'Traceback' not in result.stderr


def test_malformed_gin_file(tmp_path):
  gin_file = tmp_path / 'broken.gin'
  gin_file.write_text('create_q_network.fc_layer_params = (64,\n')
  result = run_binary('binaries.local_main', '--gin_file', str(gin_file))
  assert result.returncode == 1
  assert 'bad gin config' in _error_line(result)


def test_gin_binding_to_an_unknown_parameter():
  result = run_binary('binaries.learner_main', '--root_dir', '/tmp/unused',
                      '--gin_bindings', 'train.no_such_parameter = 1')
  assert result.returncode == 1
  assert 'no_such_parameter' in _error_line(result)


def test_a_binding_of_the_launchers_old_gin_name_says_its_new_one(tmp_path):
  root_dir = tmp_path / 'run'
  result = run_binary('binaries.local_main', '--root_dir', str(root_dir),
                      '--gin_bindings', 'run_local.target_return = 100')
  assert result.returncode == 1
  assert ("No configurable matching 'run_local'. (the launcher's gin name is "
          'run_training now') in _error_line(result)
  assert not root_dir.exists()


def test_missing_gin_file():
  result = run_binary('binaries.actor_main', '--root_dir', '/tmp/unused',
                      '--gin_file', 'no_such_experiment.gin')
  assert result.returncode == 1
  assert "gin file not found: 'no_such_experiment.gin'" in _error_line(result)
  # Nothing else: TensorFlow's start-up lines are not the user's business.
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_unknown_precision():
  result = run_binary('binaries.local_main', '--actor_precision', 'int4')
  assert result.returncode != 0
  assert 'int4' in result.stderr
  assert 'Traceback' not in result.stderr


def test_zero_actors():
  result = run_binary('binaries.local_main', '--num_actors', '0')
  assert result.returncode == 1
  assert '--num_actors must be at least 1' in _error_line(result)


def test_unknown_energy_country(tmp_path):
  root_dir = tmp_path / 'run'
  result = run_binary('binaries.local_main', '--root_dir', str(root_dir),
                      '--energy_country', 'Atlantis')
  assert result.returncode == 1
  assert "unknown energy country 'Atlantis'" in _error_line(result)
  assert not root_dir.exists()


def test_unreachable_reverb_server_is_named_and_bounded(tmp_path):
  result = run_binary('binaries.actor_main', '--root_dir', str(tmp_path),
                      '--replay_server_address', 'localhost:1',
                      '--gin_bindings', 'run_actor.server_timeout_s = 3',
                      timeout=90)
  assert result.returncode == 1
  assert 'could not reach the Reverb server at localhost:1' in _error_line(
      result)


def test_a_finished_run_directory_is_not_overwritten(tmp_path):
  (tmp_path / 'summary.json').write_text('{}')
  result = run_binary('binaries.local_main', '--root_dir', str(tmp_path))
  assert result.returncode == 1
  assert 'holds a finished run' in _error_line(result)
  assert (tmp_path / 'summary.json').read_text() == '{}'


def test_a_run_directory_of_another_config_is_refused(tmp_path):
  (tmp_path / 'run.json').write_text(json.dumps(
      {'gin_config': 'load_environment.env_name = "Acrobot-v1"',
       'actor_precision': 'int8', 'seed': 0}))
  result = run_binary('binaries.local_main', '--root_dir', str(tmp_path))
  assert result.returncode == 1
  assert 'holds an unfinished run of another config (its gin_config differ' \
      in _error_line(result)
  assert sorted(os.listdir(tmp_path)) == ['run.json']


def test_a_directory_that_holds_something_else_is_refused(tmp_path):
  (tmp_path / 'notes.txt').write_text('mine')
  result = run_binary('binaries.local_main', '--root_dir', str(tmp_path))
  assert result.returncode == 1
  assert 'is not empty and holds no ActorQ run' in _error_line(result)
  assert sorted(os.listdir(tmp_path)) == ['notes.txt']
