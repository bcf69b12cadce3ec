"""Trains on one machine: Reverb server, learner, evaluator and N actors.

  python -m binaries.local_main                      # int8 DQN on CartPole-v1
  python -m binaries.local_main --gin_file dqn_acrobot.gin --num_actors 2
  python -m binaries.local_main --gin_file d4pg_pendulum.gin

Running the same command with the same --root_dir resumes an unfinished run.
"""
import datetime
import json
import os

from absl import flags

from binaries import common
from actorq_tf import PRECISIONS
from actorq_tf import agents
from actorq_tf import environments
from actorq_tf import launcher
from actorq_tf.errors import ActorQError

flags.DEFINE_enum('actor_precision', 'int8', PRECISIONS,
                  'What the actors run: int8 (ActorQ), fp16, fp32 TFLite, '
                  'or tf, TF-Agents\' stock fp32 policy.')
flags.DEFINE_integer('num_actors', 1, 'Actor processes (one per core).')
flags.DEFINE_float('target_return', None, 'Stop when the greedy eval return '
                   '(mean of 10 episodes) reaches this on '
                   'run_local.target_evaluations_in_a_row (2) evaluations in '
                   'a row; default from the gin file.')
flags.DEFINE_integer('max_env_steps', 300_000, 'Stop after this many env '
                     'steps over all actors; 0 for no limit.')
flags.DEFINE_float('max_wall_time_s', 3600, 'Stop after this many seconds; 0 '
                   'for no limit.')
flags.DEFINE_bool('restart_failed_roles', True, 'Restart a role that dies '
                  '(the server and learner from their checkpoints); if off, '
                  'a dying role ends the run with an error.')
flags.DEFINE_float('continue_after_target_s', 0, 'Train on this many seconds '
                   'after the target is met, to see whether the policy holds '
                   '(post_target_returns in summary.json).')
flags.DEFINE_float('chaos_kill_interval_s', 0, 'Fault injection: SIGKILL a '
                   'random role this often, in seconds; 0 never.')
common.define_energy_flags()
FLAGS = flags.FLAGS


def main(_):
  if FLAGS.num_actors < 1:
    raise ActorQError(f'--num_actors must be at least 1, not '
                      f'{FLAGS.num_actors}')
  common.parse_gin()
  agents.check_environment(environments.load_environment())
  root_dir = FLAGS.root_dir or os.path.join(
      'runs', '{}_{}_seed{}_{}'.format(
          os.path.splitext(os.path.basename(FLAGS.gin_file[-1]))[0],
          FLAGS.actor_precision, FLAGS.seed,
          datetime.datetime.now().strftime('%Y%m%d-%H%M%S')))
  settings = launcher.RunSettings(
      root_dir=os.path.abspath(root_dir),
      gin_files=[os.path.abspath(f) if os.path.exists(f) else f
                 for f in FLAGS.gin_file],
      gin_bindings=FLAGS.gin_bindings,
      actor_precision=FLAGS.actor_precision, num_actors=FLAGS.num_actors,
      seed=FLAGS.seed, max_env_steps=FLAGS.max_env_steps,
      max_wall_time_s=FLAGS.max_wall_time_s,
      restart_failed_roles=FLAGS.restart_failed_roles,
      chaos_kill_interval_s=FLAGS.chaos_kill_interval_s,
      continue_after_target_s=FLAGS.continue_after_target_s,
      energy_country=FLAGS.energy_country if FLAGS.track_energy else None)
  overrides = ({} if FLAGS.target_return is None else
               {'target_return': FLAGS.target_return})
  summary = launcher.run_local(settings, **overrides)
  print(json.dumps(summary, indent=1))


def run():
  common.run(main)


if __name__ == '__main__':
  run()
