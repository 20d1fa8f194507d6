"""Reader queries for episodes (`workbench/episodes.py`): a rollout's turns and tool calls, read back as the
`Episode` that was written; a single-turn rollout reads as a two-turn episode (its prompt, its response)."""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.episodes import Episode, episode_from_rows, single_turn
from workbench.errors import DataError, StoreError
from workbench.store.connection import Lake

_KEY = "run_id = ? AND step = ? AND stage = ? AND prompt_id = ? AND idx = ?"


class EpisodeReaderMixin:
    """Read methods of `Store` for episodes; `self._lake` is the attached store."""

    _lake: Lake

    def episode(self, run_id: str, step: int, stage: int, prompt_id: str, idx: int) -> Episode:
        """The rollout (run_id, step, stage, prompt_id, idx) as an Episode: its stored turns and tool
        calls, or, for a single-turn rollout, its prompt and response as two turns. StoreError when the
        store has no such rollout."""
        key = [run_id, int(step), int(stage), str(prompt_id), int(idx)]
        turns = self._lake.read(f"SELECT * FROM turns WHERE {_KEY} ORDER BY turn", key)
        if turns.height:
            calls = self._lake.read(f"SELECT * FROM tool_calls WHERE {_KEY} ORDER BY turn, call", key)
            return episode_from_rows(turns.to_dicts(), calls.to_dicts())
        row = self._lake.read(
            "SELECT r.response, r.token_ids, r.token_entropy, r.token_logprobs, r.finish_reason, p.text "
            "FROM rollouts r LEFT JOIN prompts p ON p.run_id = r.run_id AND p.prompt_id = r.prompt_id "
            f"WHERE r.{_KEY.replace(' AND ', ' AND r.')}", key)
        if row.height == 0:
            raise StoreError(f"run {run_id!r} has no rollout at step {step}, stage {stage}, prompt "
                             f"{prompt_id!r}, idx {idx}")
        r = row.row(0, named=True)
        return single_turn(r["text"] or "", r["response"] or "", token_ids=r["token_ids"],
                           entropy=r["token_entropy"], logprobs=r["token_logprobs"],
                           finish_reason=r["finish_reason"])

    def has_episodes(self, run_id: str) -> bool:
        """Whether the run stored any multi-turn rollout (a probe of the `turns` table, cheap when it is empty)."""
        return not self._lake.read_sparse("turns", "SELECT run_id FROM turns WHERE run_id = ? LIMIT 1",
                                          [run_id]).is_empty()

    def episodes(self, run_id: str, keys: list[tuple[int, int, str, int]]) -> dict[tuple[int, int, str, int], Episode]:
        """The stored episodes among the rollouts `keys` ((step, stage, prompt_id, idx) each), in two
        queries (turns, calls) whatever their number: a page of rollouts' conversations. Keys of
        single-turn rollouts are absent from the answer (`episode` reads one as two turns)."""
        keys = [(int(a), int(b), str(c), int(d)) for a, b, c, d in keys]
        if not keys:
            return {}
        steps = sorted({k[0] for k in keys})
        prompts = sorted({k[2] for k in keys})
        marks = lambda xs: ", ".join("?" for _ in xs)  # noqa: E731
        where = f"run_id = ? AND step IN ({marks(steps)}) AND prompt_id IN ({marks(prompts)})"
        params = [run_id, *steps, *prompts]
        turns = self._lake.read(f"SELECT * FROM turns WHERE {where} ORDER BY step, stage, prompt_id, idx, turn", params)
        if turns.height == 0:
            return {}
        calls = self._lake.read(f"SELECT * FROM tool_calls WHERE {where} ORDER BY step, stage, prompt_id, idx, turn, call",
                                params)
        wanted = set(keys)
        by_key: dict[tuple, tuple[list, list]] = {}
        for row in turns.iter_rows(named=True):
            key = (row["step"], row["stage"], row["prompt_id"], row["idx"])
            if key in wanted:
                by_key.setdefault(key, ([], []))[0].append(row)
        for row in calls.iter_rows(named=True):
            key = (row["step"], row["stage"], row["prompt_id"], row["idx"])
            if key in by_key:
                by_key[key][1].append(row)
        return {key: episode_from_rows(t, c) for key, (t, c) in by_key.items()}

    def episode_turns(self, run_id: str, *, step_min: int | None = None, step_max: int | None = None,
                      prompt_id: str | None = None, columns: list[str] | None = None) -> pl.DataFrame:
        """The turns of a run's episodes in a window of steps (one query, ordered by rollout then turn):
        what a page of episodes or an analysis over many reads instead of one `episode` call each."""
        return self._episode_table("turns", "turn", run_id, step_min, step_max, prompt_id, columns)

    def episode_tool_calls(self, run_id: str, *, step_min: int | None = None, step_max: int | None = None,
                           prompt_id: str | None = None, columns: list[str] | None = None) -> pl.DataFrame:
        """The tool calls of a run's episodes in a window of steps, ordered by rollout, turn and call."""
        return self._episode_table("tool_calls", "turn, call", run_id, step_min, step_max, prompt_id, columns)

    def _episode_table(self, table: str, order: str, run_id: str, step_min: int | None, step_max: int | None,
                       prompt_id: str | None, columns: list[str] | None) -> pl.DataFrame:
        from workbench.store.records import check_columns
        where, params = ["run_id = ?"], [run_id]
        bounds: list[tuple[str, Any]] = [("step >= ?", step_min), ("step <= ?", step_max), ("prompt_id = ?", prompt_id)]
        for clause, value in bounds:
            if value is not None:
                where.append(clause)
                params.append(value if clause.startswith("prompt") else int(value))
        if columns is not None:
            check_columns(table, list(columns))
            select = ", ".join(dict.fromkeys(["step", "stage", "prompt_id", "idx", *columns]))
        else:
            select = "*"
        if step_min is not None and step_max is not None and int(step_min) > int(step_max):
            raise DataError(f"{table}: step_min ({step_min}) is after step_max ({step_max})")
        return self._lake.read(f"SELECT {select} FROM {table} WHERE {' AND '.join(where)} "
                               f"ORDER BY step, stage, prompt_id, idx, {order}", params)
