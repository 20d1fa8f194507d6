"""What every importer shares: the normalised rollout frame, bad-input accounting, finding or creating
the imported run, and the import loop (which step files are new, batching whole steps into
transactions). Turning one step's frame into store rows is `workbench.integrations.records`.

A format module (verl, trl_files, nemo_rl, jsonl) only says which files hold which step
(`discover`), whether a file looks finished (`looks_complete`) and how to read one file into the
normalised frame (`read`). Everything else happens here, the same for every format.

The normalised frame, one row per sampled response (columns after `step` may be absent):

| column | type | meaning |
|---|---|---|
| step | Int64 | the trainer's step the file belongs to |
| prompt | Utf8 | prompt text as the framework logged it |
| response | Utf8 | response text (a multi-turn rollout's assistant turns) |
| reward | Float64 | the scalar reward the trainer used |
| group | Utf8 | the trainer's group key (verl's uid less its last two parts), when logged; without it, rows with equal prompt text in one step are one group |
| answer | Utf8 | reference answer (verl `gts`), when logged |
| advantage | Float64 | the advantage the trainer computed, when logged |
| correct | Boolean | the source's verdict (verl `acc`), when logged; null rows are judged by the run's rule |
| observations | List(Utf8) | environment turns kept apart from the response (NeMo-RL), when logged |
| length | Int64 | response length in tokens, when the format has tokens |
| token_ids | List(Int64) | response token ids, when logged |
| token_logprobs | List(Float64) | behaviour (generation) log-probs of the response tokens, when logged |
| term:<name> | Float64 | one reward term, unweighted (TRL's per-function rewards, verl's numeric reward-extra keys); null where not scored |
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from workbench.correctness import parse_rule, rule_config, run_rule
from workbench.errors import DataError
from workbench.integrations.guards import ImportWatch
# prompt_ids is read from here by the TRL modules
from workbench.integrations.records import eval_rows, group_sizes, prompt_ids, train_record  # noqa: F401
from workbench.store import StepRecord

if TYPE_CHECKING:
    from workbench.store.protocols import ImportStore

BATCH_ROWS = 50_000
"""Rollouts per store transaction: whole steps are grouped until they reach this many rows."""

@dataclass(frozen=True)
class StepFile:
    """One file the framework wrote for one step."""

    step: int
    path: Path
    split: str = "train"
    """"train" (rollouts the trainer learned from) or "eval" (validation samples, stored as evals)."""


class Format(Protocol):
    """What a format module provides (see verl.py for the smallest example). A module whose files hold
    several steps each (the generic jsonl reader) also sets `multi_step = True`; its StepFile.step is -1
    and the frame's `step` column says which step each row belongs to."""

    name: str

    def discover(self, path: Path, options: dict[str, Any]) -> list[StepFile]: ...

    def looks_complete(self, f: StepFile) -> bool: ...

    def read(self, f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame: ...


class Problems:
    """Bad input: raise at the first problem (default), or count it and go on (`skip_bad`)."""

    def __init__(self, skip_bad: bool = False) -> None:
        self.skip_bad = skip_bad
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def bad(self, where: str, key: str | None, why: str) -> None:
        """Report one bad row/file. `where` is `file:line` (or `file:row N`, or the file), `key` the
        field at fault (None when the line itself is malformed), `why` the reason without location."""
        reason = f"{key!r}: {why}" if key is not None else why
        if not self.skip_bad:
            raise DataError(f"{where}: {reason}")
        self.counts[reason] += 1
        self.first.setdefault(reason, where)

    def summary(self) -> list[dict[str, Any]]:
        return [{"reason": r, "count": n, "first": self.first[r]} for r, n in self.counts.most_common()]


# -- checking values in the slow (line by line) path -----------------------------------------------

def kind_ok(value: Any, kind: str) -> bool:
    """Is `value` of JSON kind `kind`: str, number, int, list, bool, any."""
    if kind == "any":
        return True
    if kind == "str":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "bool":
        return isinstance(value, bool)
    raise ValueError(kind)


def read_json_lines(path: Path, required: dict[str, str], problems: Problems,
                    optional: dict[str, str] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Parse a JSONL file line by line: (line number, object) for every good line. A line that is not
    a JSON object, lacks a `required` key or holds a value of the wrong kind (`required`/`optional`:
    key -> kind, see `kind_ok`) is reported to `problems` with `file:line` and the key."""
    out = []
    optional = optional or {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.bad(where, None, f"malformed JSON ({exc.msg})")
                continue
            if not isinstance(obj, dict):
                problems.bad(where, None, f"not a JSON object (a {type(obj).__name__})")
                continue
            ok = True
            for key, kind in required.items():
                if key not in obj or obj[key] is None:
                    problems.bad(where, key, "missing key")
                    ok = False
                    break
                if not kind_ok(obj[key], kind):
                    problems.bad(where, key, f"expected {kind}, got {type(obj[key]).__name__}")
                    ok = False
                    break
            if ok:
                for key, kind in optional.items():
                    if obj.get(key) is not None and not kind_ok(obj[key], kind):
                        problems.bad(where, key, f"expected {kind}, got {type(obj[key]).__name__}")
                        ok = False
                        break
            if ok:
                out.append((lineno, obj))
    return out


def ends_with_newline(path: Path) -> bool:
    """Does the file end with a newline (a JSONL writer that writes a whole file in one call has
    finished it)? False for an empty or unreadable file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) == b"\n"
    except OSError:
        return False


def as_text(value: Any) -> str | None:
    """A logged value as text: strings unchanged, anything else as JSON (None stays None)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def text_column(frame: pl.DataFrame, name: str) -> pl.Series:
    """Column `name` as text: strings unchanged, numbers cast, nested values as JSON."""
    col = frame[name]
    if col.dtype == pl.Utf8:
        return col
    if col.dtype.is_numeric() or col.dtype == pl.Boolean:
        return col.cast(pl.Utf8)
    return pl.Series(name, [as_text(v) for v in col.to_list()], dtype=pl.Utf8)


# -- the imported run ------------------------------------------------------------------------------

def find_run(store: ImportStore, source: str, path: Path, name: str) -> str | None:
    """The run an earlier import of `path` in `source` format under `name` created, if any."""
    runs = store.runs_from(source, name)
    for run_id, config in runs.select("run_id", "config").iter_rows():
        try:
            where = (json.loads(config) if config else {}).get("import", {}).get("path")
        except (json.JSONDecodeError, AttributeError):
            continue
        if where == str(path):
            return run_id
    return None


@dataclass
class Report:
    """What one pass of an import did (printed by the CLI as JSON)."""

    run_id: str
    created: bool = False
    steps: list[int] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    rollouts: int = 0
    eval_samples: int = 0
    skipped_files: int = 0
    parse_s: float = 0.0
    write_s: float = 0.0
    guards_s: float = 0.0
    """Of `write_s`: the guards over the committed steps."""
    cpu_s: float = 0.0

    def as_dict(self, problems: Problems) -> dict[str, Any]:
        return {"run_id": self.run_id, "created": self.created, "steps_imported": len(self.steps),
                "first_step": min(self.steps) if self.steps else None,
                "last_step": max(self.steps) if self.steps else None,
                "eval_steps_imported": len(self.eval_steps), "rollouts": self.rollouts,
                "eval_samples": self.eval_samples, "skipped_files": self.skipped_files,
                "skipped": problems.summary(), "skipped_rows": sum(problems.counts.values()),
                "parse_s": round(self.parse_s, 3), "write_s": round(self.write_s, 3),
                "guards_s": round(self.guards_s, 3), "cpu_s": round(self.cpu_s, 3)}


class Importer:
    """Imports the step files of one folder (or file) into one run; safe to run again (only files of
    steps the run does not hold yet are read)."""

    def __init__(self, store: ImportStore, fmt: Format, path: str | Path, *, name: str | None = None,
                 options: dict[str, Any] | None = None, skip_bad: bool = False,
                 batch_rows: int = BATCH_ROWS) -> None:
        self.store, self.fmt = store, fmt
        self.path = Path(path).resolve()
        if not self.path.exists():
            raise DataError(f"{path}: no such file or folder")
        self.options = dict(options or {})
        self.rule = parse_rule(self.options.get("correct_if"))
        if self.options.get("correct_if") is not None:
            self.options["correct_if"] = self.rule.text
        self.name = name or f"{fmt.name}-{self.path.stem}"
        self.problems = Problems(skip_bad)
        self.batch_rows = batch_rows
        self.run_id: str | None = find_run(store, fmt.name, self.path, self.name)
        if self.run_id is not None:
            self._check_rule()
        self.created = False
        self._done: set[int] | None = None
        self._done_eval: set[int] | None = None
        self._seen: dict[Path, tuple[int, int]] = {}
        self._tokenizer: Any = None
        self._prompts: set[str] = set()
        """Prompt ids the run stores (or that a batch being written holds)."""
        self.guard_watch: ImportWatch | None = None
        """The guards over the run's imported steps (made by the first batch committed)."""

    def _check_rule(self) -> None:
        """A run imported again keeps its rule: a different --correct-if would judge its steps two ways."""
        runs = self.store.list_runs()
        config = runs.filter(pl.col("run_id") == self.run_id)["config"].to_list()
        stored = run_rule(config[0] if config else None)
        if self.options.get("correct_if") is None:
            self.rule = stored
        elif stored != self.rule:
            raise DataError(f"--correct-if {self.rule.text!r}: run {self.run_id} was imported with the rule "
                            f"{stored.text!r}; import under another --name to judge it another way")

    # which steps the run holds
    def _load_done(self) -> None:
        if self._done is not None:
            return
        if self.run_id is None:
            self._done, self._done_eval, self._prompts = set(), set(), set()
            return
        self._prompts = set(self.store.prompts(self.run_id)["prompt_id"].to_list())
        self._done = set(self.store.run_steps(self.run_id)["step"].to_list())
        self._done_eval = set(self.store.evals(self.run_id)["step"].unique().to_list())

    def pending(self) -> list[StepFile]:
        """Step files in the folder whose step the run does not hold yet, in step order."""
        self._load_done()
        files = self.fmt.discover(self.path, self.options)
        if getattr(self.fmt, "multi_step", False):  # steps are inside the files: re-read changed files
            out = []
            for f in files:
                st = f.path.stat()
                if self._seen.get(f.path) != (st.st_size, st.st_mtime_ns):
                    out.append(f)
            return out
        out = [f for f in files if f.step not in (self._done if f.split == "train" else self._done_eval)]
        return sorted(out, key=lambda f: (f.step, f.split != "eval"))

    def _ensure_run(self, first: pl.DataFrame | None) -> str:
        if self.run_id is not None:
            return self.run_id
        group = 8
        if first is not None and first.height:
            group = int(group_sizes(first).mode().sort()[-1])
        config = {"import": {"format": self.fmt.name, "path": str(self.path),
                             "options": {k: v for k, v in self.options.items() if v is not None}},
                  "allocator": {"name": "uniform", "params": {"n": max(1, min(group, 4096))}},
                  "correctness": rule_config(self.rule, "the source's logged verdict where it has one, else the rule")}
        self.run_id = self.store.create_run(self.name, config, 0, status="imported", source=self.fmt.name)
        self.created = True
        return self.run_id

    def import_files(self, files: list[StepFile]) -> Report:
        """Read each file and write its step (train) or evals (eval); whole steps are batched into
        transactions of about `batch_rows` rollouts. A bad file stops the import (after the steps read
        before it are written), unless skipping bad input."""
        self._load_done()
        report = Report(run_id=self.run_id or "", created=False)
        cpu0 = time.process_time()
        if self.run_id is None:  # create the run from a training file (its group size goes in the config)
            first = next((i for i, f in enumerate(files) if f.split == "train"), 0)
            files = [*files[first:first + 1], *files[:first], *files[first + 1:]]
        batch: list[StepRecord] = []
        rows = 0
        try:
            for f in files:
                t0 = time.perf_counter()
                try:
                    frame = self.fmt.read(f, self.problems, self.options)
                except DataError:
                    if not self.problems.skip_bad:
                        raise
                    report.skipped_files += 1
                    continue
                if frame.height and "length" not in frame.columns and self.options.get("tokenizer"):
                    frame = frame.with_columns(length=self._lengths(frame["response"]))
                if frame.height == 0:
                    if f.path.stat().st_size > 0:
                        self.problems.bad(str(f.path), None, "no usable rows")
                    report.skipped_files += 1
                    continue
                for step, part in self._steps_of(f, frame):
                    run_id = self._ensure_run(part if f.split == "train" else None)
                    if f.split == "eval":
                        evals, prompts = eval_rows(part, self._prompts, self.rule)
                        report.parse_s += time.perf_counter() - t0
                        self._flush(batch, report)
                        batch, rows = [], 0
                        t1 = time.perf_counter()
                        self.store.add_prompts(run_id, prompts)
                        self.store.write_evals(run_id, step, evals)
                        report.write_s += time.perf_counter() - t1
                        report.eval_steps.append(step)
                        report.eval_samples += part.height
                        self._done_eval.add(step)  # type: ignore[union-attr]
                        t0 = time.perf_counter()
                        continue
                    batch.append(train_record(run_id, step, part, self.fmt.name, self._prompts, self.rule))
                    report.parse_s += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    rows += part.height
                    if rows >= self.batch_rows:
                        self._flush(batch, report)
                        batch, rows = [], 0
        finally:
            self._flush(batch, report)
            report.cpu_s = time.process_time() - cpu0
            report.run_id = self.run_id or ""
            report.created = self.created
        return report

    def _lengths(self, texts: pl.Series) -> pl.Series:
        """Response lengths in tokens by re-tokenising the text with `options["tokenizer"]` (a local
        Hugging Face tokenizer folder), for formats that log text only (verl, TRL). The count can differ
        from the generated tokens where a text has several tokenisations; the ids are not stored."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(str(self.options["tokenizer"]))
            except (OSError, ValueError) as exc:
                raise DataError(f"--tokenizer {self.options['tokenizer']}: cannot load a tokenizer: "
                                f"{str(exc).splitlines()[0]}") from exc
        ids = self._tokenizer(texts.to_list(), add_special_tokens=False)["input_ids"]
        return pl.Series("length", [len(x) for x in ids], dtype=pl.Int64)

    def _steps_of(self, f: StepFile, frame: pl.DataFrame) -> list[tuple[int, pl.DataFrame]]:
        """The file's steps not yet imported: one for a step file; for a multi-step file (generic JSONL)
        its steps in order, less those the run holds."""
        if not getattr(self.fmt, "multi_step", False):
            return [(f.step, frame)]
        st = f.path.stat()
        self._seen[f.path] = (st.st_size, st.st_mtime_ns)
        done = self._done if f.split == "train" else self._done_eval
        parts = frame.partition_by("step", as_dict=True, maintain_order=True)
        return [(int(k[0]), v) for k, v in sorted(parts.items()) if int(k[0]) not in done]  # type: ignore[operator]

    def _flush(self, batch: list[StepRecord], report: Report) -> None:
        """Commit the batch: its whole steps in ONE transaction (all of them or none)."""
        if not batch:
            return
        t0 = time.perf_counter()
        self.store.write_steps(batch)
        t1 = time.perf_counter()
        if self.guard_watch is None or self.guard_watch.run_id != batch[0].run_id:
            self.guard_watch = ImportWatch(self.store, batch[0].run_id, new_run=self.created)
        self.guard_watch.observe_records(batch)  # guards, alert only (an imported run is steered elsewhere)
        report.guards_s += time.perf_counter() - t1
        report.write_s += time.perf_counter() - t0
        for record in batch:
            report.steps.append(record.step)
            report.rollouts += record.rollouts.num_rows
            self._done.add(record.step)  # type: ignore[union-attr]
        batch.clear()

    def run_once(self) -> Report:
        """Import every pending step file once."""
        return self.import_files(self.pending())

