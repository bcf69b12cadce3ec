"""Bad input: one clear line and a non-zero exit, nothing left half-made."""
import concurrent.futures
import json
import os

import pytest

from conftest import run_binary

# Each test's command is named above it (`runs_binary`) and started, two at
# a time, when the module begins: a run is mostly one core importing
# TensorFlow for 6-10 s, so on two cores the module takes half as long.
# Each test then waits for its own run and asserts on it as before.
_RUNS = {}


def runs_binary(arrange, timeout=180):
  """The decorated test's run: `arrange(directory)` prepares a fresh
  directory of the test's own and returns run_binary's arguments."""

  def register(test):
    _RUNS[test.__name__] = arrange, timeout
    return test

  return register


@pytest.fixture(scope='module')
def started_runs(request, tmp_path_factory):
  """{test name: (its directory, the future of its run)} for the tests of
  this module that this session runs."""
  selected = {item.originalname for item in request.session.items
              if item.module is request.module}
  runs = {}
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as executor:
    for name, (arrange, timeout) in _RUNS.items():
      if name in selected:
        directory = tmp_path_factory.mktemp(name)
        runs[name] = directory, executor.submit(
            run_binary, *arrange(directory), timeout=timeout)
    yield runs
    for _, future in runs.values():
      future.cancel()  # Those not started yet: a failed test stops early.


@pytest.fixture
def run(request, started_runs):
  """The result of this test's run, and its directory."""
  directory, future = started_runs[request.node.originalname]
  return future.result(), directory


def _error_line(result):
  lines = [l for l in result.stderr.splitlines() if 'error:' in l]
  assert lines, result.stderr[-2000:]
  return lines[-1]


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory / 'run'),
    '--gin_bindings', "load_environment.env_name = 'Nope-v0'"))
def test_unknown_environment(run):
  result, directory = run
  assert result.returncode == 1
  assert "unknown environment 'Nope-v0'" in _error_line(result)
  assert 'Traceback' not in result.stderr
  assert not (directory / 'run').exists()


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory),
    '--gin_bindings', "load_environment.env_name = 'Pendulum-v1'"))
def test_dqn_on_a_continuous_environment(run):
  result, _ = run
  assert result.returncode == 1
  assert 'DQN needs one discrete action' in _error_line(result)


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory / 'run'),
    '--gin_file', 'd4pg_pendulum.gin',
    '--gin_bindings', "load_environment.env_name = 'CartPole-v1'"))
def test_d4pg_on_a_discrete_environment(run):
  result, directory = run
  assert result.returncode == 1
  assert 'D4PG needs a bounded vector of continuous actions' in _error_line(
      result)
  assert not (directory / 'run').exists()


@runs_binary(lambda directory: (
    'binaries.learner_main', '--root_dir', str(directory),
    '--gin_file', 'd4pg_cartpole_balance.gin',
    '--gin_bindings', "load_environment.env_name = 'cartpole-juggle'"))
def test_unknown_control_suite_task(run):
  result, _ = run
  assert result.returncode == 1
  assert "unknown environment 'cartpole-juggle'" in _error_line(result)
  assert 'Traceback' not in result.stderr


def _broken_gin_file(directory):
  gin_file = directory / 'broken.gin'
  gin_file.write_text('create_q_network.fc_layer_params = (64,\n')
  return 'binaries.local_main', '--gin_file', str(gin_file)


@runs_binary(_broken_gin_file)
def test_malformed_gin_file(run):
  result, _ = run
  assert result.returncode == 1
  assert 'bad gin config' in _error_line(result)


@runs_binary(lambda _: (
    'binaries.learner_main', '--root_dir', '/tmp/unused',
    '--gin_bindings', 'train.no_such_parameter = 1'))
def test_gin_binding_to_an_unknown_parameter(run):
  result, _ = run
  assert result.returncode == 1
  assert 'no_such_parameter' in _error_line(result)


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory / 'run'),
    '--gin_bindings', 'run_local.target_return = 100'))
def test_a_binding_of_the_launchers_old_gin_name_says_its_new_one(run):
  result, directory = run
  assert result.returncode == 1
  assert ("No configurable matching 'run_local'. (the launcher's gin name is "
          'run_training now') in _error_line(result)
  assert not (directory / 'run').exists()


@runs_binary(lambda _: (
    'binaries.actor_main', '--root_dir', '/tmp/unused',
    '--gin_file', 'no_such_experiment.gin'))
def test_missing_gin_file(run):
  result, _ = run
  assert result.returncode == 1
  assert "gin file not found: 'no_such_experiment.gin'" in _error_line(result)
  # Nothing else: TensorFlow's start-up lines are not the user's business.
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@runs_binary(lambda _: ('binaries.local_main', '--actor_precision', 'int4'))
def test_unknown_precision(run):
  result, _ = run
  assert result.returncode != 0
  assert 'int4' in result.stderr
  assert 'Traceback' not in result.stderr


@runs_binary(lambda _: ('binaries.local_main', '--num_actors', '0'))
def test_zero_actors(run):
  result, _ = run
  assert result.returncode == 1
  assert '--num_actors must be at least 1' in _error_line(result)


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory / 'run'),
    '--envs_per_actor', '0'))
def test_zero_environments_per_actor(run):
  result, directory = run
  assert result.returncode == 1
  assert '--envs_per_actor must be at least 1, not 0' in _error_line(result)
  assert not (directory / 'run').exists()


@runs_binary(lambda directory: (
    'binaries.local_main', '--root_dir', str(directory / 'run'),
    '--energy_country', 'Atlantis'))
def test_unknown_energy_country(run):
  result, directory = run
  assert result.returncode == 1
  assert "unknown energy country 'Atlantis'" in _error_line(result)
  assert not (directory / 'run').exists()


@runs_binary(lambda directory: (
    'binaries.actor_main', '--root_dir', str(directory),
    '--replay_server_address', 'localhost:1',
    '--gin_bindings', 'run_actor.server_timeout_s = 3'), timeout=90)
def test_unreachable_reverb_server_is_named_and_bounded(run):
  result, _ = run
  assert result.returncode == 1
  assert 'could not reach the Reverb server at localhost:1' in _error_line(
      result)


def _finished_run(directory):
  (directory / 'summary.json').write_text('{}')
  return 'binaries.local_main', '--root_dir', str(directory)


@runs_binary(_finished_run)
def test_a_finished_run_directory_is_not_overwritten(run):
  result, directory = run
  assert result.returncode == 1
  assert 'holds a finished run' in _error_line(result)
  assert (directory / 'summary.json').read_text() == '{}'


def _unfinished_run_of_another_config(directory):
  (directory / 'run.json').write_text(json.dumps(
      {'gin_config': 'load_environment.env_name = "Acrobot-v1"',
       'actor_precision': 'int8', 'seed': 0}))
  return 'binaries.local_main', '--root_dir', str(directory)


@runs_binary(_unfinished_run_of_another_config)
def test_a_run_directory_of_another_config_is_refused(run):
  result, directory = run
  assert result.returncode == 1
  assert 'holds an unfinished run of another config (its gin_config differ' \
      in _error_line(result)
  assert sorted(os.listdir(directory)) == ['run.json']


def _notes_of_the_user(directory):
  (directory / 'notes.txt').write_text('mine')
  return 'binaries.local_main', '--root_dir', str(directory)


@runs_binary(_notes_of_the_user)
def test_a_directory_that_holds_something_else_is_refused(run):
  result, directory = run
  assert result.returncode == 1
  assert 'is not empty and holds no ActorQ run' in _error_line(result)
  assert sorted(os.listdir(directory)) == ['notes.txt']
