"""TF-Agents' stock single-process DQN: the baseline ActorQ must beat.

The loop is TF-Agents' own DQN example (tf_agents/examples/dqn/
dqn_train_eval.py): one process, a local Reverb table written by
`ReverbAddTrajectoryObserver`, a `PyDriver` stepping the agent's greedy
policy (TF, fp32) with epsilon-greedy exploration one env step at a time,
and `agent.train` on batches from the table's dataset. What means the same as in
an ActorQ run comes from the same gin config, so that the two learn alike
per env step: the environment, the network's layer sizes, every DQN setting
(`dqn.create_dqn_agent`), batch size, train steps per env step
(`replay_table.samples_per_insert` / `train.batch_size`), replay capacity and
warm-up, and actor 0's exploration (`dqn.epsilon_greedy`). The network is
TF-Agents' plain fp32 QNetwork, and it plays its newest weights (TF-Agents
has no counterpart of `train.policy_average_decay`). Evaluation plays the
evaluator's greedy episodes on its seeds at every `train.export_interval`
train steps, and the run stops by the same rule (`evaluation.StoppingRule`,
`run_training.target_evaluations_in_a_row`).

  python -m benchmarks.stock_dqn --root_dir /tmp/stock --seed 1 \
      --gin_file dqn_cartpole.gin --continue_after_target_s 300

Writes `summary.json` (the launcher's keys for time and env steps to target,
post-target returns and the stopping rule) and `eval/results.jsonl` in
--root_dir.
"""
import json
import os
import time
from typing import Dict

from absl import app
from absl import flags
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.drivers import py_driver
from tf_agents.networks import q_network
from tf_agents.policies import py_policy
from tf_agents.policies import py_tf_eager_policy
from tf_agents.replay_buffers import reverb_replay_buffer
from tf_agents.replay_buffers import reverb_utils
from tf_agents.utils import common

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import dqn
from actorq_tf import environments
from actorq_tf import evaluation
from actorq_tf import exploration
from actorq_tf import launcher
from actorq_tf import learner
from actorq_tf import networks
from actorq_tf import records
from actorq_tf import replay
from actorq_tf import run_directory
from actorq_tf import runtime
from actorq_tf import supervision
from actorq_tf.config import bound_parameter as bound
from actorq_tf.errors import ActorQError
from benchmarks.end_to_end import STOCK


class _EpsilonGreedy(py_policy.PyPolicy):
  """The greedy policy's action, or a random one with the schedule's
  epsilon at the current env step (what EpsilonGreedyPolicy does)."""

  def __init__(self, greedy: py_policy.PyPolicy,
               explorer: exploration.EpsilonGreedy, env_step):
    super().__init__(greedy.time_step_spec, greedy.action_spec)
    self._greedy = greedy
    self._explorer = explorer
    self._env_step = env_step

  def _action(self, time_step, policy_state):
    step = self._greedy.action(time_step, policy_state)
    action = self._explorer.act(int(step.action), self._env_step())
    return step._replace(action=np.asarray(action, step.action.dtype))


def train_to_target(root_dir: str, seed: int = 0,
                    max_env_steps: int = 300_000,
                    max_wall_time_s: float = 3600.0,
                    continue_after_target_s: float = 0.0,
                    log=print) -> Dict:
  """Trains until the stopping rule is met (and `continue_after_target_s`
  more) or a budget ends; returns the summary. gin holds the config."""
  start = time.monotonic()
  start_wall_time = time.time()
  target_return = bound(launcher.run_training, 'target_return')
  if target_return is None:
    raise ActorQError('the config binds no run_training.target_return')
  networks.set_seed(seed)
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  if not isinstance(algorithm, dqn.DqnBuilder):
    raise ActorQError('the stock baseline is DQN; the config trains '
                      f'{algorithm.name}')
  environments.seed_environment(env, seed)
  eval_envs = [environments.load_environment() for _ in range(
      bound(evaluation.run_evaluator, 'num_episodes'))]
  eval_seeds = [10**6 + seed * 1000 + i for i in range(len(eval_envs))]

  train_step = tf.Variable(0, dtype=tf.int64, name='train_step')
  network = q_network.QNetwork(
      env.observation_spec(), env.action_spec(),
      fc_layer_params=tuple(bound(networks.create_q_network,
                                  'fc_layer_params')))
  network.create_variables()
  agent = dqn.create_dqn_agent(env, network, train_step)
  batch_size = bound(learner.train, 'batch_size')
  train_steps_per_env_step = bound(replay.replay_table,
                                   'samples_per_insert') / batch_size
  min_size = bound(replay.replay_table, 'min_size_to_sample')
  export_interval = bound(learner.train, 'export_interval')

  sequence_length = agent.train_sequence_length
  table = reverb.Table(
      replay.REPLAY_TABLE, max_size=bound(replay.replay_table, 'capacity'),
      sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
      rate_limiter=reverb.rate_limiters.MinSize(1))
  server = reverb.Server([table])
  replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
      agent.collect_data_spec, sequence_length=sequence_length,
      table_name=replay.REPLAY_TABLE, local_server=server)
  # Windows padded at episode ends, as TF-Agents offers for n-step returns:
  # without them an episode's last n - 1 states never start a window, their
  # Q-values are never fitted, and n-step targets that bootstrap from them
  # diverged here (n = 5: mean Q 79 after 1,200 train steps on random play,
  # whose returns are about 11; every evaluation 9.x).
  observer = reverb_utils.ReverbAddTrajectoryObserver(
      replay_buffer.py_client, replay.REPLAY_TABLE,
      sequence_length=sequence_length, stride_length=1,
      pad_end_of_episodes=True, tile_end_of_episodes=True)
  dataset = replay_buffer.as_dataset(
      sample_batch_size=batch_size, num_steps=sequence_length).prefetch(3)

  env_steps = [0]
  # Actor 0's schedule (the only actor of a one-actor run), applied in
  # Python: a TF epsilon variable or callable in TF-Agents' EpsilonGreedyPolicy
  # cost 3 ms per env step here, twice what the rest of the collect step
  # costs, and would slow the baseline for no reason.
  collect_policy = _EpsilonGreedy(
      py_tf_eager_policy.PyTFEagerPolicy(agent.policy, use_tf_function=True),
      algorithm.explorer(env, actor_index=0, num_actors=1, seed=seed),
      lambda: env_steps[0])

  def count_env_step(trajectory):
    if not trajectory.is_boundary():
      env_steps[0] += 1

  driver = py_driver.PyDriver(env, collect_policy,
                              observers=[observer, count_env_step],
                              max_steps=1)
  train_fn = common.function(agent.train)

  @tf.function(input_signature=[tf.TensorSpec(
      [None, *env.observation_spec().shape], tf.float32)])
  def greedy_actions(observations):
    return tf.argmax(network(observations)[0], axis=-1)

  rule = evaluation.StoppingRule(
      'return_fp32', target_return,
      bound(launcher.run_training, 'target_evaluations_in_a_row'),
      len(eval_envs))
  results_path = os.path.join(root_dir, run_directory.EVAL_RESULTS_FILE)
  os.makedirs(os.path.dirname(results_path), exist_ok=True)
  summary = records.RunSummary(
      precision=STOCK, seed=seed, code_version=run_directory.code_version(),
      start_time=start_wall_time, stopping_rule=rule.description(),
      target_return=rule.target_return, target_metric=rule.metric)
  target_time = None
  owed_train_steps = 0.0
  iterator = None
  time_step = env.reset()
  status = None
  error = None
  try:
    while status is None:
      time_step, _ = driver.run(time_step)
      if env_steps[0] >= min_size:
        owed_train_steps += train_steps_per_env_step
      while owed_train_steps >= 1.0:
        owed_train_steps -= 1.0
        iterator = iterator or iter(dataset)
        experience, _ = next(iterator)
        train_fn(experience)
        step = int(train_step)
        if step % export_interval:
          continue
        returns = evaluation.greedy_returns(
            eval_envs, lambda o: greedy_actions(o).numpy(), eval_seeds)
        result = {'time': time.time(), 'version': step,
                  'return_fp32': float(np.mean(returns)),
                  'returns_fp32': returns, 'env_steps': env_steps[0]}
        with open(results_path, 'a') as f:
          f.write(json.dumps(result) + '\n')
        log(f'[{time.monotonic() - start:6.0f} s] env steps {env_steps[0]:,} '
            f'| train steps {step:,} | eval: {result["return_fp32"]:.1f}')
        if target_time is not None:
          summary.post_target_returns.append([step, result['return_fp32']])
        elif rule.met_by(result):
          target_time = time.monotonic()
          summary.target_reached = True
          summary.time_to_target_s = round(result['time'] - start_wall_time,
                                           1)
          summary.env_steps_to_target = env_steps[0]
          summary.train_steps_to_target = step
          summary.target_evaluation = {k: result[k] for k in ('version',
                                                              'return_fp32')}
      budget = supervision.over_budget(max_env_steps, max_wall_time_s,
                                    env_steps[0], time.monotonic() - start)
      if target_time is not None:
        if budget or (time.monotonic() - target_time >=
                      continue_after_target_s):
          status = 'target_reached'
      elif budget:
        status = budget
  except KeyboardInterrupt:
    # As the launcher does on Ctrl-C: the summary says the run was cut short.
    status = 'interrupted (SIGINT)'
  except Exception as e:  # pylint: disable=broad-except
    # As a launcher run does, a failed run leaves a summary that says why.
    status, error = 'failed', f'{type(e).__name__}: {e}'
  finally:
    observer.close()
    server.stop()
  summary.status, summary.error = status, error
  summary.env_steps, summary.train_steps = env_steps[0], int(train_step)
  summary.wall_time_s = round(time.monotonic() - start, 1)
  run_directory.write_summary(root_dir, summary)
  if error:
    raise ActorQError(f'the stock baseline failed: {error}')
  return summary


def main(_):
  flags_ = flags.FLAGS
  config.parse_gin(flags_.gin_file, flags_.gin_bindings)
  # The same TensorFlow threads as an ActorQ run's learner: what is compared
  # is the architecture, not a thread setting either could use.
  runtime.tensorflow_threads()
  summary = train_to_target(
      flags_.root_dir, flags_.seed, flags_.max_env_steps,
      flags_.max_wall_time_s, flags_.continue_after_target_s)
  print(json.dumps(summary.to_dict(), indent=1))


def _define_flags():
  flags.DEFINE_string('root_dir', None, 'Where results and the summary go.')
  flags.DEFINE_multi_string('gin_file', ['dqn_cartpole.gin'],
                            'The ActorQ config whose settings the baseline '
                            'shares.')
  flags.DEFINE_multi_string('gin_bindings', [], 'Gin bindings.')
  flags.DEFINE_integer('seed', 0, 'Seed of TensorFlow, the environment and '
                       'the evaluation episodes.')
  flags.DEFINE_integer('max_env_steps', 300_000, 'Env step budget.')
  flags.DEFINE_float('max_wall_time_s', 3600, 'Wall-time budget.')
  flags.DEFINE_float('continue_after_target_s', 0, 'Train on this long after '
                     'the target, to see whether the policy holds.')
  flags.mark_flag_as_required('root_dir')


if __name__ == '__main__':
  # Flags only when run: the report imports this module for its name.
  _define_flags()
  app.run(main)
