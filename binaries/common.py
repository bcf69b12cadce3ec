"""What every binary shares: the usual flags, gin, quiet logs, clean errors."""
import os
import signal
import sys
import threading

from absl import app
from absl import flags
from absl import logging

from actorq_tf import config
from actorq_tf import energy
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


def stop_on_signals() -> threading.Event:
  """An event that SIGTERM and SIGINT set, for a clean shutdown."""
  stop = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stop.set())
  # Python runs signal handlers on the main thread only, and a learner's main
  # thread was seen blocked inside Reverb sampling for good: the wakeup fd is
  # written by the C-level handler at once, so a thread sets the event.
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd)

  def set_on_wakeup():
    os.read(read_fd, 1)
    stop.set()

  threading.Thread(target=set_on_wakeup, daemon=True).start()
  return stop


def run(main):
  """app.run that shows an ActorQError as one line and exits with 1."""

  def main_with_clean_errors(argv):
    logging.set_verbosity(logging.INFO)
    try:
      main(argv)
    except ActorQError as e:
      print(f'{sys.argv[0].split("/")[-1]}: error: {e.message}',
            file=sys.stderr)
      sys.exit(1)
    # The role has written and closed everything it keeps. Interpreter
    # shutdown can still block on Reverb's and tf.data's C++ threads (a
    # learner was seen stuck there after its final checkpoint), so exit now.
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # pylint: disable=protected-access

  app.run(main_with_clean_errors)
