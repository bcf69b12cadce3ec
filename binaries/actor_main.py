"""Runs one actor: the newest policy in an environment, feeding replay."""
from absl import flags

from . import common
from actorq_tf import PRECISIONS
from actorq_tf import actor
from actorq_tf import runtime

common.define_server_address_flag()
common.define_model_key_flag()
flags.DEFINE_enum('actor_precision', 'int8', PRECISIONS,
                  'int8, fp16, fp32 or int4_weights (4-bit weights, float '
                  'activations; needs LiteRT) TFLite models, or tf: '
                  'TF-Agents\' own fp32 policy on the learner\'s variables.')
flags.DEFINE_integer('actor_index', 0, 'Index of this actor.')
flags.DEFINE_integer('num_actors', 1, 'Actors in the run (epsilon spread).')
flags.DEFINE_integer('max_env_steps', 0, 'Stop after this many env steps; 0 '
                     'runs until stopped.')
flags.DEFINE_integer('model_pull_interval', 0, 'Env steps between pulls of a '
                     'newer model; 0: 1 for tf, 100 for TFLite.')
flags.DEFINE_integer('envs_per_actor', None, 'Environments this actor '
                     'steps, with one model call for all; unset: '
                     'run_actor.envs_per_actor of the gin config (1).')
flags.mark_flag_as_required('root_dir')
FLAGS = flags.FLAGS


def main(_):
  common.parse_gin()
  stop = runtime.stop_on_signals()
  actor.run_actor(FLAGS.root_dir, FLAGS.replay_server_address,
                  precision=FLAGS.actor_precision,
                  actor_index=FLAGS.actor_index, num_actors=FLAGS.num_actors,
                  seed=FLAGS.seed, max_env_steps=FLAGS.max_env_steps,
                  model_pull_interval=FLAGS.model_pull_interval,
                  should_stop=stop.is_set,
                  **common.model_key_args(), **_environments())


def _environments():
  """The flag's count, if given; else the gin config's."""
  if FLAGS.envs_per_actor is None:
    return {}
  return {'envs_per_actor': FLAGS.envs_per_actor}


def run():
  common.run(main)


if __name__ == '__main__':
  run()
