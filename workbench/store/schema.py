"""The store's tables: columns and types (the public surface users write SQL against), the schema
version and the migrations that bring an older store up to date on open.

`docs/store.md` documents every column with meaning and units; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

SCHEMA_VERSION = 16
"""Bumped whenever a table or column changes; older stores are migrated on open (see MIGRATIONS)."""

EPISODE_KEY = [("run_id", "VARCHAR"), ("step", "INTEGER"), ("stage", "INTEGER"), ("prompt_id", "VARCHAR"),
               ("idx", "INTEGER")]
"""The columns that tie a turn or a tool call to its rollout."""

# (column, DuckDB type) per table. JSON columns are written as text and typed JSON in the store.
TABLES: dict[str, list[tuple[str, str]]] = {
    "meta": [("key", "VARCHAR"), ("value", "VARCHAR")],
    "runs": [
        ("run_id", "VARCHAR"), ("name", "VARCHAR"), ("created_at", "TIMESTAMPTZ"),
        ("updated_at", "TIMESTAMPTZ"), ("status", "VARCHAR"), ("config", "JSON"), ("seed", "BIGINT"),
        ("pid", "INTEGER"), ("host", "VARCHAR"), ("heartbeat_at", "TIMESTAMPTZ"),
        ("parent_run_id", "VARCHAR"), ("code_version", "VARCHAR"), ("error", "VARCHAR"),
        ("log_path", "VARCHAR"), ("source", "VARCHAR"),
    ],
    "steps": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("created_at", "TIMESTAMPTZ"),
        ("policy_version", "INTEGER"), ("rollouts", "INTEGER"), ("prompts", "INTEGER"),
        ("tokens_generated", "BIGINT"), ("reward_mean", "DOUBLE"), ("reward_std", "DOUBLE"),
        ("entropy_mean", "DOUBLE"), ("zero_signal_frac", "DOUBLE"), ("loss", "DOUBLE"), ("kl", "DOUBLE"),
        ("clip_frac", "DOUBLE"), ("grad_norm", "DOUBLE"), ("lr", "DOUBLE"), ("temperature", "DOUBLE"),
        ("budget_kind", "VARCHAR"), ("budget", "BIGINT"), ("allocator", "VARCHAR"),
        ("allocator_params", "JSON"), ("time_generate_s", "DOUBLE"), ("time_verify_s", "DOUBLE"),
        ("time_train_s", "DOUBLE"), ("time_log_s", "DOUBLE"), ("step_time_s", "DOUBLE"),
        ("metrics", "MAP(VARCHAR, DOUBLE)"),
    ],
    "allocations": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("stage", "INTEGER"), ("prompt_id", "VARCHAR"),
        ("allocator", "VARCHAR"), ("asked", "INTEGER"), ("granted", "INTEGER"), ("reason", "VARCHAR"),
        ("predicted_pass", "DOUBLE"), ("alpha_before", "DOUBLE"), ("beta_before", "DOUBLE"),
        ("budget_kind", "VARCHAR"), ("budget", "BIGINT"), ("budget_left", "BIGINT"),
        ("used_in_update", "BOOLEAN"), ("stats_version", "INTEGER"),
    ],
    "rollouts": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("stage", "INTEGER"), ("prompt_id", "VARCHAR"),
        ("idx", "INTEGER"), ("policy_version", "INTEGER"), ("response", "VARCHAR"),
        ("token_ids", "INTEGER[]"), ("token_entropy", "FLOAT[]"), ("reward", "FLOAT"),
        ("verdict", "VARCHAR"), ("finish_reason", "VARCHAR"), ("length", "INTEGER"),
        ("logprob_sum", "FLOAT"), ("entropy_mean", "FLOAT"), ("entropy_max", "FLOAT"),
        ("advantage", "FLOAT"), ("temperature", "FLOAT"), ("off_policy", "BOOLEAN"),
        ("used_in_update", "BOOLEAN"), ("worker", "VARCHAR"), ("token_logprobs", "FLOAT[]"),
        ("reward_terms", "MAP(VARCHAR, DOUBLE)"),
        ("correct", "BOOLEAN"), ("observations", "VARCHAR[]"),
        ("version_start", "INTEGER"), ("version_end", "INTEGER"), ("segments", "INTEGER"),
        ("staleness", "INTEGER"), ("is_weight_mean", "FLOAT"), ("token_trainer_logprobs", "FLOAT[]"),
        ("shape", "VARCHAR"), ("reused_tokens", "INTEGER"), ("draft_tokens", "INTEGER"),
        ("draft_rejected_at", "INTEGER"), ("parent_idx", "INTEGER"), ("branch_at", "INTEGER"),
        ("draft_mode", "VARCHAR"),
        ("turns", "INTEGER"), ("tool_calls", "INTEGER"), ("tool_errors", "INTEGER"), ("tool_tokens", "INTEGER"),
        ("filter_kept", "BOOLEAN"), ("decision", "MAP(VARCHAR, FLOAT)"),
    ],
    # Episodes (workbench/episodes.py): the turns and tool calls of a multi-turn rollout, keyed by the
    # rollout's (run_id, step, stage, prompt_id, idx). A single-turn rollout has no rows here.
    "turns": EPISODE_KEY + [
        ("turn", "INTEGER"), ("parent_turn", "INTEGER"), ("role", "VARCHAR"), ("text", "VARCHAR"),
        ("token_ids", "INTEGER[]"), ("loss_mask", "BOOLEAN[]"), ("token_entropy", "FLOAT[]"),
        ("token_logprobs", "FLOAT[]"), ("prompt", "BOOLEAN"), ("finish_reason", "VARCHAR"),
        ("started_s", "DOUBLE"), ("seconds", "DOUBLE"), ("waited_s", "DOUBLE"),
    ],
    "tool_calls": EPISODE_KEY + [
        ("turn", "INTEGER"), ("call", "INTEGER"), ("name", "VARCHAR"), ("arguments", "VARCHAR"),
        ("result", "VARCHAR"), ("error", "VARCHAR"), ("seconds", "DOUBLE"), ("truncated", "BOOLEAN"),
    ],
    "prompt_stats": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("prompt_id", "VARCHAR"), ("alpha", "DOUBLE"),
        ("beta", "DOUBLE"), ("pass_mean", "DOUBLE"), ("visits", "INTEGER"), ("rollouts", "INTEGER"),
        ("correct", "INTEGER"), ("easy_streak", "INTEGER"), ("hard_streak", "INTEGER"),
        ("last_step", "INTEGER"), ("last_pass", "DOUBLE"),
    ],
    # A summary of `rollouts` per run x step x prompt, written by the writer in the step's transaction
    # (`records.prompt_summary`): what the Compare prompts page reads instead of every rollout of a run.
    "prompt_outcomes": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("prompt_id", "VARCHAR"), ("rollouts", "INTEGER"),
        ("judged", "INTEGER"), ("correct", "INTEGER"), ("reward_sum", "DOUBLE"), ("length_mean", "DOUBLE"),
        ("entropy_mean", "DOUBLE"),
    ],
    "prompts": [
        ("run_id", "VARCHAR"), ("prompt_id", "VARCHAR"), ("split", "VARCHAR"), ("level", "INTEGER"),
        ("text", "VARCHAR"), ("answer", "VARCHAR"), ("metadata", "JSON"),
    ],
    "evals": [
        ("run_id", "VARCHAR"), ("step", "INTEGER"), ("prompt_id", "VARCHAR"), ("level", "INTEGER"),
        ("samples", "INTEGER"), ("correct", "INTEGER"), ("greedy_correct", "BOOLEAN"),
        ("mean_length", "DOUBLE"),
    ],
    "events": [
        ("event_id", "VARCHAR"), ("run_id", "VARCHAR"), ("step", "INTEGER"), ("ts", "TIMESTAMPTZ"),
        ("level", "VARCHAR"), ("kind", "VARCHAR"), ("message", "VARCHAR"), ("data", "JSON"),
        ("rolled_back", "BOOLEAN"),
    ],
    "controls": [
        ("control_id", "BIGINT"), ("run_id", "VARCHAR"), ("created_at", "TIMESTAMPTZ"), ("who", "VARCHAR"),
        ("command", "VARCHAR"), ("args", "JSON"), ("status", "VARCHAR"), ("applied_step", "INTEGER"),
        ("reason", "VARCHAR"), ("resolved_at", "TIMESTAMPTZ"),
    ],
    "alerts": [
        ("alert_id", "VARCHAR"), ("run_id", "VARCHAR"), ("created_at", "TIMESTAMPTZ"), ("guard", "VARCHAR"),
        ("rule", "VARCHAR"), ("window_steps", "INTEGER"), ("action", "VARCHAR"), ("first_step", "INTEGER"),
        ("step", "INTEGER"), ("steps_run_id", "VARCHAR"), ("evidence", "JSON"), ("rollouts", "INTEGER"),
        ("message", "VARCHAR"), ("hint", "VARCHAR"), ("status", "VARCHAR"), ("outcome", "VARCHAR"),
        ("resolved_at", "TIMESTAMPTZ"),
    ],
    "alert_rollouts": [
        ("alert_id", "VARCHAR"), ("run_id", "VARCHAR"), ("step", "INTEGER"), ("stage", "INTEGER"),
        ("prompt_id", "VARCHAR"), ("idx", "INTEGER"),
    ],
}

# Tables whose rows belong to a step of a run: rollback_run deletes them past the step.
STEP_TABLES = ("steps", "allocations", "rollouts", "prompt_stats", "evals", "turns", "tool_calls", "prompt_outcomes")

# Tables written in one or few rows per step: their rows are kept inline in the catalog (no Parquet
# file per step) up to this many rows per insert, then flushed to Parquet by `compact`.
INLINE_ROW_LIMIT = {"runs": 100, "steps": 100, "events": 100, "controls": 100, "meta": 100, "alerts": 100,
                    "alert_rollouts": 1000,
                    "allocations": 1000, "prompt_stats": 1000, "evals": 1000, "prompts": 1000,
                    "prompt_outcomes": 1000}

_ARROW = {
    "VARCHAR": pa.string(), "JSON": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"), "INTEGER[]": pa.list_(pa.int32()),
    "FLOAT[]": pa.list_(pa.float32()), "BOOLEAN[]": pa.list_(pa.bool_()), "VARCHAR[]": pa.list_(pa.string()),
    "MAP(VARCHAR, DOUBLE)": pa.map_(pa.string(), pa.float64()),
    "MAP(VARCHAR, FLOAT)": pa.map_(pa.string(), pa.float32()),
}

# Allocation inside episodes (issue #41): the decisions behind a rollout are stored in one map column,
# rollouts.decision, a key per number (absent: not decided), beside filter_kept. Nine columns of their own cost
# every Parquet file of every run ~100 bytes each in the footer, filled or not: 6.5% of an organism episode's
# bytes as committed with RoC and ARPO on (dev/LOG.md, 2026-12-05). Readers see them as the named fields below.
FILTER_REASONS = ("whole_group", "correct_low_penalty", "correct_high_penalty", "wrong_sampled", "wrong_not_sampled")
"""Why GRPO-RoC kept or dropped an episode (`workbench.rollout.roc`); stored as its index, `decision['reason']`."""
_REASONS_SQL = f"[{', '.join(repr(r) for r in FILTER_REASONS)}]"
"""FILTER_REASONS as a SQL list literal (index i + 1 holds code i)."""
DECISION_FIELDS: dict[str, tuple[str, str]] = {
    "filter_penalty": ("penalty", "FLOAT"),
    "filter_reason": ("reason", "VARCHAR"),
    "branch_entropy_before": ("entropy_before", "FLOAT"),
    "branch_entropy_after": ("entropy_after", "FLOAT"),
    "branch_draw": ("draw", "FLOAT"),
    "branch_rounds": ("rounds", "INTEGER"),
    "branch_split": ("split", "INTEGER"),
    "branch_split_dh": ("split_dh", "FLOAT"),
}
"""A rollout's decision fields as readers (and writers of rows) name them -> (key in rollouts.decision, type)."""


def decision_select(fields: list[str] | tuple[str, ...] | None = None, column: str = "decision") -> str:
    """SQL that reads the named decision `fields` (default: all) out of the map `column` as typed columns."""
    out = []
    for name in fields if fields is not None else DECISION_FIELDS:
        key, kind = DECISION_FIELDS[name]
        value = f"map_extract_value({column}, '{key}')"
        if kind == "VARCHAR":
            value = f"{_REASONS_SQL}[{value}::INTEGER + 1]"
        elif kind == "INTEGER":
            value = f"{value}::INTEGER"
        out.append(f"{value} AS {name}")
    return ", ".join(out)


def decision_map_sql() -> str:
    """SQL that builds rollouts.decision from the named columns of schema 15 (the migration to 16)."""
    entries = []
    for name, (key, kind) in DECISION_FIELDS.items():
        value = f"(list_position({_REASONS_SQL}, {name}) - 1)::FLOAT" if kind == "VARCHAR" else f"{name}::FLOAT"
        entries.append(f"{{'k': '{key}', 'v': {value}}}")
    built = f"map_from_entries(list_filter([{', '.join(entries)}], e -> e.v IS NOT NULL))"
    return f"CASE WHEN cardinality({built}) = 0 THEN NULL ELSE {built} END"


def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema rows of `table` are converted to before they are inserted."""
    return pa.schema([pa.field(name, _ARROW[kind]) for name, kind in TABLES[table]])


def json_columns(table: str) -> list[str]:
    """Columns of `table` typed JSON (dict/list values are serialised before insert)."""
    return [name for name, kind in TABLES[table] if kind == "JSON"]


def create_statements(tables: tuple[str, ...] | None = None) -> list[str]:
    """CREATE TABLE statements for the current schema (run in one transaction on a new store), or for
    the named `tables` only (a migration adding them)."""
    out = []
    for table, cols in TABLES.items():
        if tables is not None and table not in tables:
            continue
        body = ", ".join(f"{name} {kind}" for name, kind in cols)
        out.append(f"CREATE TABLE IF NOT EXISTS {table} ({body})")
    return out


# The file layout the dashboard's reads want: DuckLake sorted tables, applied when rows are inserted,
# when inlined rows are flushed to Parquet and when files are merged. Files cover ranges of steps (they
# are written and merged in commit order), so a step filter prunes whole files by their statistics; the
# sort inside a file then keeps row groups narrow for the lookup each table serves: rollouts in the
# order pages are read (a window of steps, then stage, prompt, index), prompt_stats by prompt (one
# prompt's history reads a few row groups, not every one), allocations by step (a step's allocations;
# sorted by prompt, a 19,532-step proxy answered a prompt's history 2.6x faster but a step's
# allocations 3.5x slower, see docs/store.md).
SORTED_BY: dict[str, str] = {
    "rollouts": "run_id, step, stage, prompt_id, idx",
    "allocations": "run_id, step, stage, prompt_id",
    "prompt_stats": "run_id, prompt_id, step",
    "steps": "run_id, step",
    "evals": "run_id, step, prompt_id",
    "events": "run_id, ts",
    "turns": "run_id, step, stage, prompt_id, idx, turn",
    "tool_calls": "run_id, step, stage, prompt_id, idx, turn, call",
    "prompt_outcomes": "run_id, step, prompt_id",
}


def layout_statements(tables: tuple[str, ...] | None = None) -> list[str]:
    """ALTER TABLE statements that give the tables (or the named `tables`) their sorted layout (`SORTED_BY`)."""
    return [f"ALTER TABLE {table} SET SORTED BY ({columns})" for table, columns in SORTED_BY.items()
            if tables is None or table in tables]


PROMPT_OUTCOMES_SELECT = (
    "SELECT run_id, step, prompt_id, count(*)::INTEGER AS rollouts, count(correct)::INTEGER AS judged, "
    "count(*) FILTER (WHERE correct)::INTEGER AS correct, sum(reward)::DOUBLE AS reward_sum, "
    "avg(length)::DOUBLE AS length_mean, avg(entropy_mean)::DOUBLE AS entropy_mean")
"""The summary of `prompt_outcomes` over rollouts rows (`... FROM rollouts GROUP BY run_id, step, prompt_id`):
the migration's backfill; the writer computes the same per step in Arrow (`records.prompt_summary`)."""


# from_version -> (description, statements that bring a store from from_version to from_version + 1).
# Each migration runs in its own transaction together with the meta update.
MIGRATIONS: dict[int, tuple[str, list[str] | Callable[[], list[str]]]] = {
    1: ("runs.source (which engine wrote the run), rollouts.worker (which rollout worker generated it) and "
        "rollouts.token_logprobs (behaviour log-probs per token, where an imported format has them)",
        ["ALTER TABLE runs ADD COLUMN source VARCHAR",
         "ALTER TABLE rollouts ADD COLUMN worker VARCHAR",
         "ALTER TABLE rollouts ADD COLUMN token_logprobs FLOAT[]"]),
    2: ("file layout for the dashboard's reads: rollouts sorted by (run_id, step, stage, prompt_id, idx), "
        "prompt_stats by (run_id, prompt_id, step), see SORTED_BY; rows written before take it when "
        "upkeep or compaction next merges their files",
        lambda: layout_statements(("rollouts", "allocations", "prompt_stats", "steps", "evals", "events"))),
    3: ("Parquet 2 encodings for the data files written from now on (smaller and faster to write; files "
        "written before keep Parquet 1 until upkeep or compaction next merges them)",
        ["CALL lake.set_option('parquet_version', '2')"]),
    4: ("rollouts.reward_terms: the reward's terms per rollout, unweighted (the verifier, format, overlong, "
        "user functions; an imported run's per-function rewards); null in rows written before",
        ["ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS reward_terms MAP(VARCHAR, DOUBLE)"]),
    5: ("rollouts.correct (the verifier's verdict, stored apart from the reward; null in rows written before, "
        "which readers judge by their run's rule, see workbench.correctness) and rollouts.observations "
        "(environment turns of a multi-turn rollout, kept apart from the response)",
        ["ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS correct BOOLEAN",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS observations VARCHAR[]"]),
    6: ("the asynchronous pipeline's record: rollouts.version_start, version_end, segments, staleness "
        "(versions behind the trainer when consumed) and is_weight_mean (mean importance weight of its "
        "tokens), allocations.stats_version (the policy version of the statistics a decision used); null "
        "in rows written before and in imported runs",
        ["ALTER TABLE allocations ADD COLUMN IF NOT EXISTS stats_version INTEGER",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS version_start INTEGER",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS version_end INTEGER",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS segments INTEGER",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS staleness INTEGER",
         "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS is_weight_mean FLOAT"]),
    7: ("alerts (one row per guard firing: rule, values, steps, action, status open / acknowledged / acted) "
        "and alert_rollouts (the rollouts behind each alert); in a migrated store their rows are not "
        "inlined (DuckLake sets no option on a table created in the same transaction)",
        lambda: create_statements(("alerts", "alert_rollouts"))),
    8: ("rollouts.token_trainer_logprobs: the trainer's log-probability of each generated token in the update "
        "(beside the behaviour policy's, token_logprobs, which the engine now fills too); null in rows written "
        "before, in rows the update did not compute and in imported runs",
        ["ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS token_trainer_logprobs FLOAT[]"]),
    9: ("rollout shapes (issue #32): rollouts.shape (independent / speculative / tree), reused_tokens, "
        "draft_tokens and draft_rejected_at (speculative: the draft's prefix kept, its length, its first "
        "rejected position), parent_idx and branch_at (tree: the row of the group it branched from, the response "
        "position of the branch); null in rows written before and in independent rows",
        [f"ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS {name} {typ}" for name, typ in (
            ("shape", "VARCHAR"), ("reused_tokens", "INTEGER"), ("draft_tokens", "INTEGER"),
            ("draft_rejected_at", "INTEGER"), ("parent_idx", "INTEGER"), ("branch_at", "INTEGER"))]),
    10: ("rollouts.draft_mode: the speculative mode a drafted rollout was verified under (\"exact\": a sample of "
         "the current policy; \"lenient\": not one); null in rows written before, in rows without a draft and "
         "in other shapes",
         ["ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS draft_mode VARCHAR"]),
    11: ("episodes (issue #40): tables turns (one row per message of a multi-turn rollout: role, text, token ids, "
         "loss mask, per-token entropy and log-probs, parent turn, timings) and tool_calls (name, arguments, result, "
         "error, seconds); rollouts.turns, tool_calls, tool_errors and tool_tokens; null in rows written before and "
         "in single-turn rows",
         lambda: create_statements(("turns", "tool_calls")) + layout_statements(("turns", "tool_calls")) + [
             f"ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS {name} INTEGER"
             for name in ("turns", "tool_calls", "tool_errors", "tool_tokens")]),
    12: ("allocation inside episodes (issue #41): rollouts.filter_kept (GRPO-RoC: kept for the update, or dropped "
         "and never trained on), filter_penalty (the filter's score), filter_reason (why); branch_entropy_before, "
         "branch_entropy_after, branch_draw (ARPO: the branch decision that made the row); null in rows written "
         "before and in rows without them",
         [f"ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS {name} {typ}" for name, typ in (
             ("filter_kept", "BOOLEAN"), ("filter_penalty", "FLOAT"), ("filter_reason", "VARCHAR"),
             ("branch_entropy_before", "FLOAT"), ("branch_entropy_after", "FLOAT"), ("branch_draw", "FLOAT"))]),
    13: ("prompt_outcomes (issue #43): one row per run x step x prompt summarising its rollouts (count, stored "
         "verdicts, correct, reward sum, mean length and entropy), written with each step; filled here from the "
         "rollouts already stored (a row without a stored verdict counts in rollouts, not in judged)",
         lambda: create_statements(("prompt_outcomes",)) + layout_statements(("prompt_outcomes",)) + [
             "DELETE FROM prompt_outcomes",  # a store taken back to an earlier version by hand still has it
             f"INSERT INTO prompt_outcomes {PROMPT_OUTCOMES_SELECT} FROM rollouts GROUP BY run_id, step, prompt_id"]),
    14: ("AEPO's decisions (issue #41): rollouts.branch_rounds (the consecutive branching rounds c of a branch's "
         "penalty), branch_split (the whole episodes m its group's split chose) and branch_split_dh (the probe's "
         "H_root - mean H_tool behind it); null in rows written before and in rows without them",
         [f"ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS {name} {typ}" for name, typ in (
             ("branch_rounds", "INTEGER"), ("branch_split", "INTEGER"), ("branch_split_dh", "FLOAT"))]),
    15: ("the decisions of allocation inside episodes in one map column (issue #41): rollouts.decision (keys "
         "penalty, reason, entropy_before, entropy_after, draw, rounds, split, split_dh; see DECISION_FIELDS) "
         "filled from filter_penalty, filter_reason, branch_entropy_before, branch_entropy_after, branch_draw, "
         "branch_rounds, branch_split and branch_split_dh, which are dropped (readers still name them; their "
         "bytes stay in the files written before until upkeep or compaction next merges them)",
         lambda: [f"ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS {name} {kind}"  # a store set back by hand
                  for name, (_, kind) in DECISION_FIELDS.items()] + [
                  "SELECT error('rollouts.filter_reason \"' || filter_reason || '\" (run ' || run_id || ', step ' "
                  f"|| step || ') is not one of {', '.join(FILTER_REASONS)}: nothing was migrated') "
                  f"FROM rollouts WHERE NOT list_contains({_REASONS_SQL}, filter_reason) LIMIT 1",
                  "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS decision MAP(VARCHAR, FLOAT)",
                  f"UPDATE rollouts SET decision = {decision_map_sql()} WHERE "
                  + " OR ".join(f"{name} IS NOT NULL" for name in DECISION_FIELDS)]
         + [f"ALTER TABLE rollouts DROP COLUMN {name}" for name in DECISION_FIELDS]),
}


def migration_path(found: int) -> list[tuple[int, str, list[str]]]:
    """The migrations to run, in order, to bring a store at schema `found` to SCHEMA_VERSION."""
    steps = []
    for version in range(found, SCHEMA_VERSION):
        if version not in MIGRATIONS:
            raise KeyError(version)
        description, statements = MIGRATIONS[version]
        steps.append((version, description, statements() if callable(statements) else list(statements)))
    return steps
