"""Trains on a Ray cluster: the same roles as local_main, placed by Ray.

  python -m binaries.ray_main                        # a new local Ray cluster
  python -m binaries.ray_main --ray_address auto --num_actors 16

The learner, with the Reverb server in its process, goes to a node Ray
chooses (with a GPU when the cluster has one), the actors (one CPU each)
spread over the nodes. Ray restarts a role whose process or node is lost;
see actorq_tf/ray_cluster.py for what must be shared between nodes.
"""
import sys

from absl import flags

from . import common

try:
  from actorq_tf import ray_cluster  # pylint: disable=g-import-not-at-top
except ImportError as e:  # Ray is an extra: actorq-tf[ray].
  sys.exit(f"ray_main: Ray is not installed ({e}): pip install "
           "'actorq-tf[ray]'")

common.define_launch_flags()
flags.DEFINE_string('ray_address', None, 'Ray cluster to run on: "auto" '
                    'joins the one this machine belongs to, "host:port" a '
                    'given one; default: start a local cluster.')
flags.DEFINE_multi_string('ray_resources', [], 'Custom Ray resources a role '
                          'kind needs, KIND:RESOURCE=AMOUNT with KIND one of '
                          f'{", ".join(ray_cluster.ROLE_KINDS)}, e.g. '
                          '"actor:cpu_worker=1" to keep actors on nodes that '
                          'offer cpu_worker.')
FLAGS = flags.FLAGS


def main(_):
  common.check_launch_flags()
  resources = ray_cluster.parse_resources(FLAGS.ray_resources)
  settings = common.run_settings()
  cluster = ray_cluster.RayCluster(settings.root_dir, FLAGS.ray_address,
                                   settings.num_actors, resources)
  try:
    common.launch(settings, roles_on=cluster)
  finally:
    cluster.close()


def run():
  common.run(main)


if __name__ == '__main__':
  run()
