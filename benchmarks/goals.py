"""The goals the ActorQ report checks: the user's design card, in one place.

The report (`benchmarks.report_writer`) reads every threshold here and
cites this file; a goal that changes changes here and nowhere else. Ratios
are int8 over the other precision unless their name says otherwise.
"""

# Actor env steps/s, int8 over the stock `tf` actor, small networks.
ACTOR_SPEEDUP_OVER_TF = 10.0
# Actor env steps/s with ActorQ's 2048x2048x2048 policy.
PAPER_ACTOR_SPEEDUP_OVER_FP32 = 3.0
PAPER_ACTOR_SPEEDUP_OVER_TF = 30.0
# (env-only step time + interpreter invoke time) / actor step time: the
# share of an int8 actor's loop spent on the two things it must do.
ACTOR_EFFICIENCY = 0.8
# Env steps/s of an int8 actor of N environments over a single-environment
# int8 actor, in the same run: at paper size, and with a small network.
MANY_ENVIRONMENTS_SPEEDUP = 1.5
MANY_ENVIRONMENTS_SPEEDUP_SMALL_NETWORK = 2.0
# Batch-1 latency, int8 over TFLite fp32, per network size.
LATENCY_OVER_FP32 = {'256x256': 0.5, '2048x2048x2048': 0.15}
# Batch-1 latency of a precision beyond int8 (int4_weights) over int8, at
# ActorQ's policy size.
BEYOND_INT8_LATENCY_OVER_INT8 = {'2048x2048x2048': 0.5}
# Wall time, energy and CO2 to the target return, int8 over `tf` actors.
TO_TARGET_OVER_TF = 0.5
# Greedy return, int8 over fp32 of the same version, at every evaluation.
RETURN_RETENTION_PER_EVALUATION = 0.98
# Greedy return, int8 over fp32, on a fixed checkpoint and the same seeds.
RETURN_RETENTION_FIXED_CHECKPOINT = 0.99
# Bytes one model update sends an actor, int8 over fp32.
MODEL_UPDATE_BYTES_OVER_FP32 = 0.3
# Against TF-Agents' own single-process DQN on the same config and seeds.
TIME_TO_TARGET_OVER_STOCK = 0.5
ENV_STEPS_TO_TARGET_OVER_STOCK = 1.0
# Share of evaluations after the target at or above the hold return.
HELD_AFTER_TARGET = 0.9
# Learner train steps/s with exports on, over exports off.
LEARNER_RATE_WITH_EXPORTS = 0.95
