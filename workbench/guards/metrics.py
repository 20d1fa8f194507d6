"""Step metrics a guard's rule may read before a run has recorded any: the engine's own names (a test
runs the engine and checks each is recorded). A live `guard add` also accepts every metric the run has
recorded (an imported run's, a newer engine's)."""

from __future__ import annotations

ENGINE_METRICS = frozenset({
    "adv/abs_mean", "adv/groups", "adv/max", "adv/mean", "adv/min", "adv/signal_rollouts",
    "adv/zero_signal_frac", "adv/zero_signal_groups", "alloc/budget", "alloc/budget_used",
    "alloc/groups_dropped", "alloc/groups_used", "perf/gen_tokens_per_s", "perf/rollouts_per_s",
    "policy_version", "rollout/count", "rollout/entropy_mean", "rollout/entropy_p10", "rollout/entropy_p50",
    "rollout/entropy_p90", "rollout/length_mean", "rollout/prompts", "rollout/reused",
    "rollout/reward_mean", "rollout/reward_std", "rollout/stages", "rollout/stop_frac",
    "rollout/temperature", "rollout/tokens_generated", "rollout/zero_signal_frac", "timing_s/allocate",
    "timing_s/generate", "timing_s/log", "timing_s/step", "timing_s/train", "timing_s/verify",
    "timing_s/weight_sync", "train/approx_kl_old", "train/clip_frac", "train/clip_frac_high",
    "train/clip_frac_low", "train/grad_norm", "train/kl", "train/loss", "train/lr", "train/optimizer_steps",
    "train/pg_loss", "train/ratio_max", "train/ratio_mean", "train/ratio_min", "train/sequences",
    "train/tokens",
})
"""Recorded by the engine at every step that trains."""

EVAL_METRICS = frozenset({"eval/greedy_acc", "eval/pass1", "eval/prompts", "timing_s/eval"})
"""Recorded at evaluation steps only (`last(...)`/`delta(...)` read the latest)."""

KNOWN_METRICS = ENGINE_METRICS | EVAL_METRICS
