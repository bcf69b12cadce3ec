"""What signing costs per model update, at the size of the policy the gin
config builds (ActorQ's paper size below), beside what the update costs
anyway.

For each exported precision and for the fp32 variables (`tf` actors and the
evaluator): the learner's HMAC-SHA256 per row, an actor's verification, and
the same row's trip through a local Reverb server (insert by the learner,
sample by an actor) and its conversion, measured in one process through the
learner's and actors' own code (`ModelPublisher`, `ModelPuller`,
`VariablesPuller`). Then what signing replay costs an actor per env step
and the learner per train step.

  .venv/bin/python -m benchmarks.signing_cost --env_steps 3000 \\
      --gin_file d4pg_walker_stand.gin \\
      --gin_bindings 'create_actor_network.fc_layer_params = (2048, 2048, 2048)'
"""
import os
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import reverb
import tensorflow as tf
from tf_agents.utils import common as tf_agents_common

from actorq_tf import agents
from actorq_tf import config
from actorq_tf import environments
from actorq_tf import export
from actorq_tf import learner
from actorq_tf import model_channel
from actorq_tf import replay
from actorq_tf import server
from actorq_tf import signing
from benchmarks import actor_throughput
from benchmarks import common

# Its flags are actor_throughput's (--gin_file, default dqn_cartpole.gin;
# --env_steps of the int8 actor; --repeats), whose helpers it runs.
FLAGS = flags.FLAGS


def _median_seconds(call, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def measure(repeats: int, actor_steps: int) -> dict:
  env = environments.load_environment()
  algorithm = agents.check_environment(env)
  policy_network = algorithm.policy_network(env)
  observations = environments.random_walk_observations(env, 256)
  key = signing.RunKey(os.urandom(32), 'benchmark')
  with tempfile.TemporaryDirectory() as model_dir:
    exporter = export.PolicyExporter(
        policy_network, algorithm.model_outputs(env), ['int8', 'fp32'],
        lambda *_: None, model_dir)
    results = exporter.export(1, observations)
  weights = policy_network.get_weights()
  reverb_server = reverb.Server(server.create_tables(env), port=None)
  address = f'localhost:{reverb_server.port}'
  figures = {'network_params': int(policy_network.count_params())}
  try:
    client = model_channel.wait_for_server(address, 10)
    publisher = model_channel.ModelPublisher(client, key)
    for result in results:
      model = model_channel.PublishedModel(
          result.version, result.precision, result.model_bytes,
          result.normalizer)
      signed = model.signed(key)
      assert signed.signed_by(key)  # What the actor checks, and passes.
      puller = model_channel.ModelPuller(client, result.precision, key)

      def pull(puller=puller):
        puller.forget_sample()
        puller.version = 0
        pulled = puller.pull_newer()
        assert pulled is not None and pulled.signature == signed.signature

      figures[result.precision] = {
          'bytes': len(result.model_bytes),
          'convert_s': result.convert_seconds,
          'sign_s': _median_seconds(lambda m=model: m.signed(key), repeats),
          'verify_s': _median_seconds(lambda s=signed: s.signed_by(key),
                                      repeats),
          'publish_s': _median_seconds(lambda m=model: publisher.publish(m),
                                       repeats),
          'pull_s': _median_seconds(pull, repeats),
      }
    parts = model_channel.variables_signed_parts(1, weights)
    variables = [v for v in policy_network.variables]
    variables_puller = model_channel.VariablesPuller(address, variables, key)
    versions = iter(range(1, 10 * repeats + 10))

    def publish_variables():
      publish_variables.version = next(versions)
      publisher.publish_variables(weights, publish_variables.version)

    def pull_variables():
      assert variables_puller.update()  # A newer signed version: verified.

    publish_s = _median_seconds(publish_variables, repeats)
    pull_times = []
    for _ in range(repeats):
      publish_variables()
      pull_times.append(_median_seconds(pull_variables, 1))
    figures['variables'] = {
        'bytes': int(sum(w.nbytes for w in weights)),
        'sign_s': _median_seconds(lambda: key.sign(parts), repeats),
        'verify_s': _median_seconds(
            lambda: key.verifies(key.sign(parts), parts), repeats) / 2,
        'publish_s': publish_s,
        'pull_and_verify_s': float(np.median(pull_times)),
    }
  finally:
    reverb_server.stop()
  figures['replay'] = _replay_signing(algorithm, env, key, actor_steps)
  return figures


def _replay_signing(algorithm, env, key: signing.RunKey,
                    actor_steps: int) -> dict:
  """What signing replay costs: an actor's `WindowSigner.sign` per env step,
  against an int8 actor's env steps/s measured in the same run (its writes
  signed, `benchmarks.actor_throughput`'s measurement, its model's steps
  only); and the learner's check of one batch (`replay.authentic`, the
  dataset's own call), against one train step of the agent on a batch of
  the same shape."""
  spec = algorithm.collect_data_spec(env)
  length = algorithm.sequence_length()
  batch_size = config.bound_parameter(learner.train, 'batch_size')
  rng = np.random.default_rng(0)
  step = tf.nest.map_structure(
      lambda s: rng.random(s.shape).astype(s.dtype.as_numpy_dtype), spec)
  signer = replay.WindowSigner(key, length)
  calls = 5000
  start = time.perf_counter()
  for _ in range(calls):
    signer.sign(step)
  sign_s = (time.perf_counter() - start) / calls
  # A batch of items as a writer wrote them: every check passes.
  signatures = []
  for _ in range(batch_size):
    signer.end_episode()
    signatures.append([signer.sign(step) for _ in range(length)][-1].signature)
  signature = np.stack(signatures)
  steps = tf.nest.map_structure(
      lambda x: np.broadcast_to(x, (batch_size, length) + np.shape(x)), step)
  leaves = tf.nest.flatten(steps)
  accepted, _ = replay.authentic(key, signature, leaves)
  assert accepted.all()
  check_s = _median_seconds(
      lambda: replay.authentic(key, signature, leaves), 20)
  agent, _ = algorithm.create_agent(env, tf.Variable(0, dtype=tf.int64))
  train = tf_agents_common.function(agent.train)
  experience = tf.nest.map_structure(tf.convert_to_tensor, steps)
  train(experience)  # traced
  train_s = _median_seconds(lambda: train(experience).loss.numpy(), 20)

  reverb_server = reverb.Server(actor_throughput.unthrottled_tables(env),
                                port=None)
  try:
    key_dir = tempfile.mkdtemp()
    key_file = os.path.join(key_dir, signing.KEY_FILE)
    signing.run_key(key_dir)
    address = f'localhost:{reverb_server.port}'
    actor_throughput.publish_all_precisions(address, env, key_file)
    rate, _ = actor_throughput.actor_rate(address, 'int8', actor_steps, 100,
                                          key_file)
  finally:
    reverb_server.stop()
  return {'step_bytes': sum(a.nbytes for a in tf.nest.flatten(step)),
          'sequence_length': length, 'batch_size': batch_size,
          'sign_step_s': sign_s,
          'int8_actor_env_steps_per_second': rate,
          'share_of_int8_actor_step': sign_s * rate,
          'check_batch_s': check_s, 'train_step_s': train_s,
          'check_share_of_train_step': check_s / train_s}


def print_table(figures: dict) -> None:
  print(f'policy network: {figures["network_params"]:,} parameters')
  print('| row | bytes | sign (learner) | verify (actor) | publish | pull | '
        'convert | sign+verify / (publish+pull) |')
  print('| --- | --- | --- | --- | --- | --- | --- | --- |')
  for row in ('int8', 'fp32', 'variables'):
    f = figures[row]
    pull = f.get('pull_s', f.get('pull_and_verify_s'))
    share = (f['sign_s'] + f['verify_s']) / (f['publish_s'] + pull)
    convert = f'{f["convert_s"]:.2f} s' if 'convert_s' in f else '-'
    print(f'| {row} | {f["bytes"]:,} | {f["sign_s"] * 1e3:.1f} ms | '
          f'{f["verify_s"] * 1e3:.1f} ms | {f["publish_s"] * 1e3:.1f} ms | '
          f'{pull * 1e3:.1f} ms{" (verify included)" if "pull_and_verify_s" in f else ""} | '
          f'{convert} | {share:.2f} |')
  r = figures['replay']
  print(f'replay, each item signed ({r["step_bytes"]:,} bytes a step): '
        f'actor {r["sign_step_s"] * 1e6:.1f} us a step, '
        f'{r["share_of_int8_actor_step"]:.1%} of an int8 actor\'s step '
        f'({r["int8_actor_env_steps_per_second"]:,.0f} env steps/s with '
        f'signed writes, measured in this run); learner '
        f'{r["check_batch_s"] * 1e3:.2f} ms to check a batch of '
        f'{r["batch_size"]} x {r["sequence_length"]} steps, '
        f'{r["check_share_of_train_step"]:.1%} of a train step '
        f'({r["train_step_s"] * 1e3:.1f} ms)')


def main(_):
  config.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings)
  figures = measure(FLAGS.repeats, FLAGS.env_steps)
  print_table(figures)
  if FLAGS.output_json:
    common.write_json(FLAGS.output_json, figures)


if __name__ == '__main__':
  app.run(main)
