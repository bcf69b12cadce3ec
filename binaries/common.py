"""What every binary shares: the usual flags, gin, quiet logs, clean errors."""
import sys
import traceback

from absl import app
from absl import flags
from absl import logging

from actorq_tf import config
from actorq_tf import energy
from actorq_tf import runtime
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


def define_server_address_flag():
  flags.DEFINE_string('replay_server_address', 'localhost:8008',
                      'host:port of the Reverb server.')


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
    except Exception:  # pylint: disable=broad-except
      traceback.print_exc()  # A bug: its traceback, then the same exit.
      runtime.exit_process(1)
    runtime.exit_process(0)

  app.run(main_with_clean_errors)
