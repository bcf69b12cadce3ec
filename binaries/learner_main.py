"""Trains the agent from replay and publishes its policy to the actors."""
from absl import flags

from binaries import common
from actorq_tf import PRECISIONS
from actorq_tf import learner
from actorq_tf import runtime

common.define_server_address_flag()
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
  learner.train(FLAGS.root_dir, FLAGS.replay_server_address,
                actor_precision=FLAGS.actor_precision, seed=FLAGS.seed,
                max_train_steps=FLAGS.max_train_steps,
                stop=stop, energy_meter=common.energy_meter())


def run():
  common.run(main)


if __name__ == '__main__':
  run()
