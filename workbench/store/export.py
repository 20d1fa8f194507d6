"""The export's SQL: a run's selected rollouts as training sets, written out of the store by DuckDB's
`COPY (query) TO` (JSON lines or Parquet): a streaming sink, so memory stays within DuckDB's limit
however many rollouts the selection holds (the SFT set needs no sort at all).

Three sets (`KINDS`):

- `sft`: every selected rollout, with `messages` in chat form (user prompt, assistant response) and the
  flat fields `workbench import jsonl` maps back (see `REIMPORT_MAP`).
- `rejection`: the best `k` correct responses per prompt (highest reward, then shortest, then latest),
  equal responses of one prompt kept once.
- `pairs`: preference pairs, a correct (chosen) and a wrong (rejected) response of the same group (step,
  stage, prompt): the i-th best correct with the i-th worst wrong, up to `k` pairs a group; in TRL's
  conversational form (`prompt`, `chosen`, `rejected` message lists).

What counts as correct is the stored verdict (`rollouts.correct`), else the run's rule over the reward.
Episodes (multi-turn rollouts with tool calls) are not in the store yet: `_messages` is the one place that
turns a rollout into messages, and where an episode's turns would go.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.correctness import Rule
from workbench.errors import DataError
from workbench.store.extensions import quote_literal
from workbench.store.reader import rollout_where
from workbench.store.store import check_read_only_sql

if TYPE_CHECKING:
    from workbench.store.store import Store

KINDS = ("sft", "rejection", "pairs")
FORMATS = ("jsonl", "parquet")
REIMPORT_MAP = ("prompt=prompt,response=response,reward=reward,step=step,correct=correct,answer=answer,"
                "advantage=advantage,length=length,token_ids=token_ids,token_logprobs=token_logprobs")
"""`workbench import jsonl FILE --map ...` that reads an `sft` export back (the same rows)."""

_FLAT = ("r.run_id, r.step, r.stage, r.prompt_id, r.idx, coalesce(p.text, r.prompt_id) AS prompt, p.answer, r.response, r.reward, "
         "{ok} AS correct, r.verdict, r.advantage, r.length, r.entropy_mean, r.finish_reason")
_TOKENS = ", r.token_ids, r.token_logprobs"


def _messages(prompt: str, response: str) -> str:
    """A one-turn rollout as chat messages (SQL)."""
    return f"[{{'role': 'user', 'content': {prompt}}}, {{'role': 'assistant', 'content': {response}}}]"


def _selection(run_id: str, filters: dict[str, Any], sql: str | None, rule: Rule) -> tuple[str, list[Any]]:
    """The selected rollouts joined with their prompts, as a FROM clause, and its parameters."""
    where, params = rollout_where(run_id, filters)
    if sql:
        if ";" in sql:
            raise DataError(f"--sql {sql!r}: one condition over the rollouts' columns, no ';'")
        check_read_only_sql(f"SELECT * FROM rollouts WHERE {sql}")
        where = f"{where} AND ({sql})"
    source = (f"(SELECT * FROM rollouts WHERE {where}) r LEFT JOIN (SELECT prompt_id, text, answer FROM prompts "
              f"WHERE run_id = ?) p ON p.prompt_id = r.prompt_id")
    return source, [*params, run_id]


def export_query(kind: str, run_id: str, filters: dict[str, Any], *, rule: Rule, sql: str | None = None,
                 k: int = 1, tokens: bool = True) -> tuple[str, list[Any]]:
    """The SELECT of one export set and its parameters."""
    if kind not in KINDS:
        raise DataError(f"export kind {kind!r}: must be one of {', '.join(KINDS)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise DataError(f"--k {k!r}: must be an integer >= 1")
    source, params = _selection(run_id, filters, sql, rule)
    ok = f"coalesce(r.correct, {rule.sql('r.reward')})"
    flat = _FLAT.format(ok=ok) + (_TOKENS if tokens else "")
    if kind == "sft":
        return f"SELECT {_messages('coalesce(p.text, r.prompt_id)', 'r.response')} AS messages, {flat} FROM {source}", params
    if kind == "rejection":
        return (f"WITH sel AS (SELECT {flat} FROM {source} WHERE {ok}), "
                "uniq AS (SELECT * FROM sel QUALIFY row_number() OVER (PARTITION BY prompt_id, response "
                "ORDER BY reward DESC, step DESC, idx) = 1) "
                f"SELECT {_messages('prompt', 'response')} AS messages, * FROM uniq QUALIFY row_number() OVER "
                "(PARTITION BY prompt_id ORDER BY reward DESC, length ASC NULLS LAST, step DESC, idx) <= ?",
                [*params, k])
    return (f"WITH sel AS (SELECT {_FLAT.format(ok=ok)} FROM {source}), "
            "good AS (SELECT *, row_number() OVER (PARTITION BY step, stage, prompt_id ORDER BY reward DESC, idx) "
            "AS k FROM sel WHERE correct), "
            "bad AS (SELECT *, row_number() OVER (PARTITION BY step, stage, prompt_id ORDER BY reward ASC, idx) "
            "AS k FROM sel WHERE NOT correct) "
            "SELECT [{'role': 'user', 'content': g.prompt}] AS prompt, "
            "[{'role': 'assistant', 'content': g.response}] AS chosen, "
            "[{'role': 'assistant', 'content': b.response}] AS rejected, "
            "g.run_id, g.step, g.stage, g.prompt_id, g.answer, g.idx AS chosen_idx, b.idx AS rejected_idx, "
            "g.reward AS chosen_reward, b.reward AS rejected_reward "
            "FROM good g JOIN bad b ON g.step = b.step AND g.stage = b.stage AND g.prompt_id = b.prompt_id "
            "AND g.k = b.k WHERE g.k <= ?", [*params, k])


class Tally:
    """What an export wrote: rows, correct rows, first and last step."""

    def __init__(self) -> None:
        self.rows = 0
        self.correct = 0
        self.step_min: int | None = None
        self.step_max: int | None = None


def copy_out(store: Store, query: str, params: list[Any], path: Path, fmt: str, *,
             memory_limit: str | None = None) -> tuple[Tally, float]:
    """Stream `query`'s rows from the store into `path` (`fmt`: jsonl or parquet) with DuckDB's `COPY ... TO`
    (a streaming sink: memory bounded by `memory_limit`, not by the selection); then count what went out
    (rows, correct rows, steps) with a second pass that reads only those columns. (tally, seconds)."""
    if fmt not in FORMATS:
        raise DataError(f"--format {fmt!r}: must be one of {', '.join(FORMATS)}")
    lake = store._lake
    t0 = time.perf_counter()
    options = "FORMAT JSON" if fmt == "jsonl" else "FORMAT PARQUET, COMPRESSION ZSTD, ROW_GROUP_SIZE 16384"
    with lake.reading(), lake.cursor() as cur:
        try:
            if memory_limit:
                cur.execute(f"SET memory_limit = '{_size(memory_limit)}'")
            cur.execute(f"COPY ({query}) TO '{quote_literal(str(path))}' ({options})", params)
            seconds = time.perf_counter() - t0
            names = [d[0] for d in cur.execute(f"SELECT * FROM ({query}) LIMIT 0", params).description]
            correct = "sum(correct::INTEGER)" if "correct" in names else "NULL"
            row = cur.execute(f"SELECT count(*), {correct}, min(step), max(step) FROM ({query})", params).fetchone()
        except duckdb.Error as exc:
            raise lake.error(exc, f"export to {path}") from exc
    tally = Tally()
    tally.rows, tally.correct, tally.step_min, tally.step_max = int(row[0]), int(row[1] or 0), row[2], row[3]
    return tally, seconds


def _size(text: str) -> str:
    import re

    if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|KiB|MiB|GiB)", str(text).strip()):
        raise DataError(f"memory limit {text!r}: expected a size such as 512MB or 1GB")
    return str(text).strip()
