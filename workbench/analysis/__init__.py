"""Analysis over what the store holds: pass@k, entropy statistics, allocation efficiency.

Pure functions of Polars frames shaped like the store's tables (read them with `workbench.store`);
notebooks and the dashboard call these and never hold SQL of their own.
"""

from workbench.analysis.efficiency import (
    allocation_efficiency,
    grants_by_step,
    group_outcomes,
    rollouts_by_difficulty,
    zero_signal_by_step,
)
from workbench.analysis.entropy import (
    detect_entropy_collapse,
    entropy_by_correctness,
    entropy_by_position,
    entropy_by_step,
    forking_token_counts,
    forking_tokens,
    token_entropies,
)
from workbench.analysis.prompts import PromptComparison, compare_runs, compare_steps
from workbench.analysis.passk import (
    bootstrap_mean_ci,
    pass_at_k,
    pass_at_k_by_k,
    pass_at_k_curve,
    sharpening_vs_gain,
    with_pass_at_k,
)
from workbench.analysis.terms import term_names, terms_by_step, terms_wide
from workbench.analysis.tokens import token_text

__all__ = [
    "allocation_efficiency",
    "bootstrap_mean_ci",
    "compare_runs",
    "compare_steps",
    "detect_entropy_collapse",
    "entropy_by_correctness",
    "entropy_by_position",
    "entropy_by_step",
    "forking_token_counts",
    "forking_tokens",
    "grants_by_step",
    "group_outcomes",
    "pass_at_k",
    "pass_at_k_by_k",
    "pass_at_k_curve",
    "PromptComparison",
    "rollouts_by_difficulty",
    "sharpening_vs_gain",
    "term_names",
    "terms_by_step",
    "terms_wide",
    "token_entropies",
    "token_text",
    "with_pass_at_k",
    "zero_signal_by_step",
]
