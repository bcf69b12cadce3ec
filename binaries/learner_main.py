"""Trains the agent from replay and publishes its policy to the actors."""
import contextlib

from absl import flags

from . import common
from actorq_tf import PRECISIONS
from actorq_tf import learner
from actorq_tf import runtime
from actorq_tf import server

common.define_server_address_flag()
common.define_model_key_flag()
common.define_replay_port_flag(
    0, 'Host the run\'s Reverb server in this process, on this port of '
    'every interface, and train from it without gRPC; 0 trains from the '
    'server at --replay_server_address.')
common.define_energy_flags()
flags.DEFINE_enum('actor_precision', 'int8', PRECISIONS,
                  'What the actors run; decides which models are exported.')
flags.DEFINE_integer('max_train_steps', 0, 'Stop after this many train '
                     'steps; 0 trains until stopped.')
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  stop = runtime.stop_on_signals()
  with contextlib.ExitStack() as hosted:
    address, on_finish = FLAGS.replay_server_address, lambda: None
    if FLAGS.replay_port:
      # Closed after `train` returns, or by the learner's watchdog before
      # it ends the process.
      service = hosted.enter_context(
          server.ReplayService(FLAGS.root_dir, FLAGS.replay_port))
      address, on_finish = service.address, service.close
    learner.train(FLAGS.root_dir, address,
                  actor_precision=FLAGS.actor_precision, seed=FLAGS.seed,
                  max_train_steps=FLAGS.max_train_steps,
                  stop=stop, energy_meter=common.energy_meter(),
                  on_finish=on_finish, **common.model_key_args())


def run():
  common.run(main)


if __name__ == '__main__':
  run()
