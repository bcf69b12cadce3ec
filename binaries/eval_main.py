"""Evaluates each new model: greedy int8 TFLite and greedy fp32, same seeds."""
from absl import flags

from . import common
from actorq_tf import evaluation
from actorq_tf import runtime

common.define_server_address_flag()
common.define_model_key_flag()
flags.DEFINE_integer('max_evaluations', 0, 'Stop after this many; 0 runs '
                     'until stopped.')
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  stop = runtime.stop_on_signals()
  evaluation.run_evaluator(FLAGS.root_dir, FLAGS.replay_server_address,
                           seed=FLAGS.seed, should_stop=stop.is_set,
                           max_evaluations=FLAGS.max_evaluations,
                           **common.model_key_args())


def run():
  common.run(main)


if __name__ == '__main__':
  run()
