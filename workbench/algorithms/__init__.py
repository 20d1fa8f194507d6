"""Advantage estimators, policy losses and the trainer's log-probability helper.

    from workbench.algorithms import get_advantage, get_policy_loss
    adv, m1 = get_advantage("grpo")(rewards, group_index)
    loss, m2 = get_policy_loss("ppo_clip")(logp, old_logp, adv, mask, clip_low=0.2, clip_high=0.28,
                                           aggregation="token")

Each function is pure and returns (value, metrics); the engine looks them up by name and never
branches on the name. Add one with `@register_advantage("name")` / `@register_policy_loss("name")`.
"""

from workbench.algorithms.advantages import (
    available_advantages,
    get_advantage,
    group_has_signal,
    group_stats,
    register_advantage,
)
from workbench.algorithms.entropy_balanced import aepo_clip_loss, entropy_scaled_advantages
from workbench.algorithms.logprobs import (
    GroupedBatch,
    PackedBatch,
    group_sequences,
    grouped_logprobs,
    pack_sequences,
    position_ids_from_mask,
    sequence_logprobs,
)
from workbench.algorithms.losses import (
    AGGREGATIONS,
    aggregate,
    available_policy_losses,
    get_policy_loss,
    kl_k3,
    register_policy_loss,
)

__all__ = [
    "AGGREGATIONS",
    "GroupedBatch",
    "PackedBatch",
    "aepo_clip_loss",
    "aggregate",
    "available_advantages",
    "available_policy_losses",
    "get_advantage",
    "get_policy_loss",
    "entropy_scaled_advantages",
    "group_has_signal",
    "group_sequences",
    "group_stats",
    "grouped_logprobs",
    "kl_k3",
    "pack_sequences",
    "position_ids_from_mask",
    "register_advantage",
    "register_policy_loss",
    "sequence_logprobs",
]
