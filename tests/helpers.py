"""Publishing a real model into a test server, as the learner does."""
import tempfile

import numpy as np

from actorq_tf import environments
from actorq_tf import export
from actorq_tf import model_channel
from actorq_tf import networks


def cartpole_observations(count=256, seed=0):
  env = environments.load_environment()
  env.seed(seed)
  rng = np.random.default_rng(seed)
  observations = []
  time_step = env.reset()
  while len(observations) < count:
    observations.append(time_step.observation)
    time_step = env.step(np.array(rng.integers(2)))
  return np.array(observations, np.float32)


def publish_policy(server_address, version, precisions=('int8',),
                   q_network=None, publish_variables=True):
  """Exports the configured Q-network and publishes models and variables."""
  q_network = q_network or networks.q_network_for(
      environments.load_environment())
  client = model_channel.wait_for_server(server_address, 10)
  publisher = model_channel.ModelPublisher(client)

  def publish_models_only(results, _):
    for result in results:
      publisher.publish(model_channel.PublishedModel(
          result.version, result.precision, result.model_bytes,
          result.normalizer))

  exporter = export.PolicyExporter(
      q_network, precisions,
      publisher.publish_exports if publish_variables else publish_models_only,
      model_dir=tempfile.mkdtemp())
  exporter.export(version, cartpole_observations())
  return q_network
