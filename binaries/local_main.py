"""Trains on one machine: learner (hosting the Reverb server), evaluator and
N actors.

  python -m binaries.local_main                      # int8 DQN on CartPole-v1
  python -m binaries.local_main --gin_file dqn_acrobot.gin --num_actors 2
  python -m binaries.local_main --gin_file d4pg_pendulum.gin

Running the same command with the same --root_dir resumes an unfinished run.
"""
from . import common

common.define_launch_flags()


def main(_):
  common.check_launch_flags()
  common.launch(common.run_settings())


def run():
  common.run(main)


if __name__ == '__main__':
  run()
