"""What every binary shares: the usual flags, gin, quiet logs, clean errors,
and the launch of a whole run (local_main, ray_main)."""
import datetime
import json
import os
import sys
import traceback

from absl import app
from absl import flags
from absl import logging

from actorq_tf import runtime
runtime.import_tensorflow()  # Before the modules below import it.
# pylint: disable=g-import-not-at-top,wrong-import-position
from actorq_tf import PRECISIONS
from actorq_tf import TFLITE_PRECISIONS
from actorq_tf import agents
from actorq_tf import config
from actorq_tf import conversion
from actorq_tf import energy
from actorq_tf import environments
from actorq_tf import errors
from actorq_tf import launcher
from actorq_tf.errors import ActorQError

flags.DEFINE_string('root_dir', None, 'Run directory: summaries, checkpoints, '
                    'models, status files.')
flags.DEFINE_multi_string('gin_file', [config.DEFAULT_GIN_FILE],
                          'gin config files, by path or by name in '
                          'gin_configs/.')
flags.DEFINE_multi_string('gin_bindings', [], 'gin bindings, e.g. '
                          '"actorq_tf.learner.train.batch_size = 128".')
flags.DEFINE_integer('seed', 0, 'Base random seed.')
FLAGS = flags.FLAGS
# Random-walk observations that calibrate the launch's trial conversion.
PREFLIGHT_OBSERVATIONS = 64


def define_server_address_flag():
  flags.DEFINE_string('replay_server_address', 'localhost:8008',
                      'host:port of the Reverb server.')


def define_model_key_flag():
  flags.DEFINE_string('model_key_file', '', 'File of the run key that signs '
                      'every model (hex, as the launcher writes it to '
                      '<root_dir>/model.key); empty: the key a launcher '
                      'handed over, else <root_dir>/model.key.')


def model_key_args():
  """run_actor's, run_evaluator's and train's key argument if the flag
  gives one: a gin binding of it (one role's key) holds otherwise."""
  return {'model_key_file': FLAGS.model_key_file} if FLAGS.model_key_file else {}


def define_replay_port_flag(default: int, help_text: str):
  flags.DEFINE_integer('replay_port', default, help_text)


def define_energy_flags():
  flags.DEFINE_bool('track_energy', True, 'Measure the machine\'s energy '
                    'and CO2 emissions with codecarbon (offline) and record '
                    'them with the run\'s figures.')
  flags.DEFINE_string('energy_country', 'USA', '3-letter ISO code of the '
                      'country whose grid carbon intensity applies.')


def energy_meter():
  """A started EnergyMeter, or None if --notrack_energy."""
  if not FLAGS.track_energy:
    return None
  return energy.EnergyMeter(FLAGS.energy_country).start()


def parse_gin():
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  runtime.tensorflow_threads()


def define_launch_flags():
  """The flags of a whole run, wherever its roles run."""
  flags.DEFINE_enum('actor_precision', 'int8', PRECISIONS,
                    'What the actors run: int8 (ActorQ), fp16, fp32 or '
                    'int4_weights (4-bit weights, float activations; needs '
                    'LiteRT) TFLite, or tf, TF-Agents\' stock fp32 policy.')
  flags.DEFINE_integer('num_actors', 1, 'Actor processes (one per core).')
  flags.DEFINE_integer('envs_per_actor', None, 'Environments each actor '
                       'steps, with one model call for all (binds '
                       'run_actor.envs_per_actor); unset: the gin config\'s.')
  flags.DEFINE_float('target_return', None, 'Stop when the greedy eval '
                     'return (mean of run_evaluator.num_episodes '
                     'episodes) reaches this on '
                     'run_training.target_evaluations_in_a_row (2) evaluations '
                     'in a row; default from the gin file.')
  flags.DEFINE_integer('max_env_steps', 300_000, 'Stop after this many env '
                       'steps over all actors; 0 for no limit.')
  flags.DEFINE_float('max_wall_time_s', 3600, 'Stop after this many seconds; '
                     '0 for no limit.')
  flags.DEFINE_bool('restart_failed_roles', True, 'Restart a role that dies '
                    '(the server and learner from their checkpoints); if '
                    'off, a dying role ends the run with an error.')
  flags.DEFINE_float('continue_after_target_s', 0, 'Train on this many '
                     'seconds after the target is met, to see whether the '
                     'policy holds (post_target_returns in summary.json).')
  flags.DEFINE_float('chaos_kill_interval_s', 0, 'Fault injection: SIGKILL a '
                     'random role this often, in seconds; 0 never.')
  define_energy_flags()


def check_launch_flags():
  """What a launch refuses before it starts anything: bad flags, a gin
  config, environment or network that does not load, a network that TFLite
  cannot take."""
  if FLAGS.num_actors < 1:
    raise ActorQError(f'--num_actors must be at least 1, not '
                      f'{FLAGS.num_actors}')
  if FLAGS.envs_per_actor is not None and FLAGS.envs_per_actor < 1:
    raise ActorQError(f'--envs_per_actor must be at least 1, not '
                      f'{FLAGS.envs_per_actor}')
  parse_gin()
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  if algorithm.users_policy_network():
    # The learner exports int8 at every version (the evaluator compares it
    # with fp32), and the actors' precision besides.
    precisions = sorted({'int8', FLAGS.actor_precision} &
                        set(TFLITE_PRECISIONS))
    with runtime.quiet_native_output():
      conversion.check_convertible(
          algorithm.policy_network(env), precisions,
          environments.random_walk_observations(env, PREFLIGHT_OBSERVATIONS))


def run_settings() -> launcher.RunSettings:
  """The run the launch flags describe."""
  root_dir = FLAGS.root_dir or os.path.join(
      'runs', '{}_{}_seed{}_{}'.format(
          os.path.splitext(os.path.basename(FLAGS.gin_file[-1]))[0],
          FLAGS.actor_precision, FLAGS.seed,
          datetime.datetime.now().strftime('%Y%m%d-%H%M%S')))
  return launcher.RunSettings(
      root_dir=os.path.abspath(root_dir),
      gin_files=[os.path.abspath(f) if os.path.exists(f) else f
                 for f in FLAGS.gin_file],
      gin_bindings=FLAGS.gin_bindings + (
          [] if FLAGS.envs_per_actor is None else
          [f'run_actor.envs_per_actor = {FLAGS.envs_per_actor}']),
      actor_precision=FLAGS.actor_precision, num_actors=FLAGS.num_actors,
      seed=FLAGS.seed, max_env_steps=FLAGS.max_env_steps,
      max_wall_time_s=FLAGS.max_wall_time_s,
      restart_failed_roles=FLAGS.restart_failed_roles,
      chaos_kill_interval_s=FLAGS.chaos_kill_interval_s,
      continue_after_target_s=FLAGS.continue_after_target_s,
      energy_country=FLAGS.energy_country if FLAGS.track_energy else None)


def launch(settings: launcher.RunSettings, roles_on=None):
  """Runs the training (see launcher.run_training) and prints its summary;
  `roles_on`: where the roles run, None for this machine."""
  overrides = ({} if FLAGS.target_return is None else
               {'target_return': FLAGS.target_return})
  summary = launcher.run_training(settings, roles_on=roles_on, **overrides)
  print(json.dumps(summary.to_dict(), indent=1))


def run(main):
  """app.run that shows an ActorQError as one line, and leaves through
  `runtime.exit_process` on every path (see `runtime`)."""

  def main_with_clean_errors(argv):
    logging.set_verbosity(logging.INFO)
    try:
      main(argv)
    except ActorQError as e:
      print(f'{sys.argv[0].split("/")[-1]}: error: {e.message}',
            file=sys.stderr)
      runtime.exit_process(1)
    except app.UsageError:
      raise  # absl prints the usage.
    except Exception as e:  # pylint: disable=broad-except
      if errors.disk_full(e):
        # Whichever write found the disk full: what was written before it
        # (checkpoints, replay checkpoints) stays, and a restart resumes.
        print(f'{sys.argv[0].split("/")[-1]}: error: the disk is full '
              f'({errors.described(e)}); the last complete checkpoints are '
              'kept', file=sys.stderr)
      else:
        traceback.print_exc()  # A bug: its traceback, then the same exit.
      runtime.exit_process(1)
    runtime.exit_process(0)

  app.run(main_with_clean_errors)
