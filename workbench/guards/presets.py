"""Named guards a researcher switches on by name, each with the failure it catches and where that
failure is described; `DEFAULT` are on for every run (thresholds chosen to stay quiet on the default
experiment, see docs/guards.md for the figures).

    [[guards]]
    preset = "entropy_collapse"
    action = "rollback"
"""

from __future__ import annotations

from dataclasses import dataclass

ZERO_SIGNAL_HINT = ("most groups carry no gradient: a multi-stage or selective allocator "
                    "(`allocator.name = \"dynamic_sampling\"` or \"selective\") spends the budget on prompts "
                    "that still teach, or raise the group size (`allocator.params.n`)")


@dataclass(frozen=True)
class Preset:
    rule: str
    window: int
    action: str
    catches: str
    source: str
    hint: str = ""


PRESETS: dict[str, Preset] = {
    "nan": Preset(
        "train/loss is not finite or train/grad_norm is not finite or train/ratio_max is not finite "
        "or rollout/entropy_mean is not finite", 1, "rollback",
        "loss, gradient norm, a log-prob ratio or the sampled entropy not finite (the weights are lost)",
        "verl #628, #747, #1121, #3025"),
    "entropy_collapse": Preset(
        "rollout/entropy_mean < 0.2 * baseline(rollout/entropy_mean, 5)", 3, "alert",
        "the policy's token entropy falls below a fifth of its own early level: exploration is gone",
        "verl #2738, #5953"),
    "entropy_blowup": Preset(
        "rollout/entropy_mean > 1.2 * baseline(rollout/entropy_mean, 5) + 0.05", 2, "alert",
        "token entropy 20% (+0.05 nats) above its early level: sampling noise (a temperature or lr fault)",
        "verl #2738, #5953"),
    "length_blowup": Preset(
        "rollout/length_mean > 2 * baseline(rollout/length_mean, 5) + 2", 3, "alert",
        "responses grow far beyond their early length (length explosion, then collapse)",
        "rllm #226"),
    "truncation": Preset(
        "share(truncated) > 0.5", 2, "alert",
        "most responses hit the token limit (a clipped ratio of 1.0 means the reward is for cut text)",
        "ms-swift #4950"),
    "degenerate_text": Preset(
        "share(repeat_frac >= 0.75 and chars >= 6) > 0.25", 2, "alert",
        "responses made mostly of one repeated character or n-gram ('!!!!', 'the the the')",
        "verl #628, #3025"),
    "reward_hacking": Preset(
        "rollout/reward_mean > 2 * last(eval/pass1) + 0.25 "
        "or (mean(rollout/reward_mean, 5) > baseline(rollout/reward_mean, 5) + 0.1 "
        "and last(eval/pass1) < baseline(eval/pass1, 1) - 0.05) "
        "or (rollout/reward_mean > baseline(rollout/reward_mean, 5) + 0.1 "
        "and rollout/length_mean < 0.6 * baseline(rollout/length_mean, 5))", 2, "alert",
        "the training reward pays far more often than the held-out evaluation passes (a reward that pays "
        "for something the task does not, from the first steps on), or it rises while the evaluation falls "
        "or while responses shrink to a trick", "trl #5790, Visual-RFT #176"),
    "reward_collapse": Preset(
        "rollout/reward_mean < 0.5 * mean(rollout/reward_mean, 10) - 0.02", 2, "alert",
        "the training reward falls below half its level over the last 10 steps: the policy broke (an "
        "update too large, a bad batch); the reward rarely comes back by itself",
        "ZeroSearch #23, open-r1 #257, Agent-R1 #8"),
    "zero_signal": Preset(
        "rollout/zero_signal_frac > 0.95", 5, "alert",
        "nearly every group's rewards agree, so it carries no gradient: the rollout budget is wasted",
        "DAPO (Yu et al. 2025), dynamic sampling", ZERO_SIGNAL_HINT),
    "tool_errors": Preset(
        "episodes/tool_error_rate > 0.5 and episodes/tool_calls >= 0.1", 3, "alert",
        "most tool calls fail (malformed or unterminated calls, unknown tools, timeouts): the model reads "
        "errors instead of results, and a reward for the final answer stops teaching the tool",
        "rStar2-Agent (Shang et al. 2025), verl #4814"),
    "turn_limit": Preset(
        "episodes/turn_limit_rate > 0.5", 3, "alert",
        "most episodes end at `rollout.episodes.max_turns` without answering: the model calls tools in a loop",
        "TRL max_tool_calling_iterations, verifiers #119"),
}
"""Every preset by name (the episodes' two read metrics only episode runs record: quiet elsewhere)."""

DEFAULT = ("nan", "entropy_collapse", "entropy_blowup", "reward_collapse", "truncation", "degenerate_text",
           "zero_signal", "tool_errors", "turn_limit")
"""Presets on for every run unless a `[[guards]]` entry of the same name turns one off."""
