"""File data sets: JSONL and Parquet rows mapped to prompts.

A field mapping names which field holds the prompt, the answer, and optionally an id, a level and
extra metadata (dotted names reach into nested objects: "meta.difficulty"). The reference answer is
extracted from worked solutions: GSM8K's `#### 42` or a MATH-style `\\boxed{...}`.

Rows that fail validation (unreadable JSON, a missing or empty prompt, no extractable answer, a
non-integer level, a duplicate id) are skipped, counted and reported with examples (row number,
reason). When more than `max_bad_frac` of the rows are bad the task refuses to load (DataError), so
a wrong field mapping cannot silently train on a handful of rows.

Splits: `eval_path` when given; otherwise a deterministic `eval_frac` of the rows (by a hash of the
prompt id and the seed, so adding rows does not move the others).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from workbench.checks import build_config, require
from workbench.errors import ConfigError, DataError
from workbench.tasks.base import Prompt, VerifyResult
from workbench.tasks.extract import reference_answer
from workbench.tasks.verifiers import BUILTIN_METHODS, Verifier

EXTRACTIONS = ("auto", "gsm8k", "boxed", "none")
FORMATS = ("auto", "jsonl", "parquet")
MAX_EXAMPLES = 5


@dataclass(frozen=True)
class FileTaskConfig:
    """A data set read from a JSONL or Parquet file."""

    path: str
    """The data file (.jsonl / .json lines, or .parquet); relative paths are relative to the working
    directory."""
    kind: str = "file"
    """Task kind; always "file" for this config."""
    format: str = "auto"
    """"jsonl", "parquet", or "auto" (from the file name's ending)."""
    eval_path: str | None = None
    """A separate eval file (same format and mapping); when None, `eval_frac` of `path` is held out."""
    eval_frac: float = 0.1
    """Share of rows held out for eval when `eval_path` is None (0 <= eval_frac < 1)."""
    prompt_field: str = "question"
    """Field holding the prompt text."""
    answer_field: str = "answer"
    """Field holding the reference answer (or a worked solution to extract it from)."""
    id_field: str | None = None
    """Field holding a stable row id; None: ids are "<file stem>-<row number>"."""
    level_field: str | None = None
    """Field holding an integer difficulty level; None: no levels."""
    metadata_fields: tuple[str, ...] = ()
    """Fields copied into each prompt's metadata (JSON-serialisable values)."""
    answer_extraction: str = "auto"
    """How to get the reference from the answer field: "gsm8k" (`#### x`), "boxed" (last
    `\\boxed{x}`), "none" (the whole field), "auto" (#### , else boxed, else the whole field)."""
    template: str = "{prompt}"
    """Prompt text; `{prompt}` is replaced by the prompt field (chat templates are applied by the
    engine with the model's tokenizer)."""
    verifier: str = "math"
    """"math", "exact", "number" (the number after the last "=", else the last one) or a user verifier
    "module:function"."""
    verify_timeout_s: float = 5.0
    """Per-call timeout of the verifier (seconds)."""
    max_bad_frac: float = 0.05
    """Refuse to load when more than this share of rows is bad."""
    max_rows: int | None = None
    """Read at most this many rows per file (None: all)."""
    max_row_bytes: int = 1_000_000
    """A JSONL line longer than this many bytes is a bad row (skipped and counted), never parsed: a
    runaway line cannot exhaust memory or become a megabyte prompt."""
    seed: int = 0
    """Seed of the train/eval split (when `eval_path` is None)."""

    def __post_init__(self) -> None:
        _check_types(self)
        require(self.kind == "file", "task.kind", f"must be 'file' for this config, got {self.kind!r}")
        require(bool(self.path), "task.path", "is required")
        require(self.format in FORMATS, "task.format", f"{self.format!r}; allowed: {', '.join(FORMATS)}")
        require(0 <= self.eval_frac < 1, "task.eval_frac", f"must be in [0, 1), got {self.eval_frac}")
        require(bool(self.prompt_field), "task.prompt_field", "is required")
        require(bool(self.answer_field), "task.answer_field", "is required")
        require(
            self.answer_extraction in EXTRACTIONS,
            "task.answer_extraction",
            f"{self.answer_extraction!r}; allowed: {', '.join(EXTRACTIONS)}",
        )
        require("{prompt}" in self.template, "task.template", f"must contain '{{prompt}}', got {self.template!r}")
        require(0 <= self.max_bad_frac <= 1, "task.max_bad_frac", f"must be in [0, 1], got {self.max_bad_frac}")
        require(self.max_rows is None or self.max_rows >= 1, "task.max_rows", "must be >= 1 or None")
        require(self.verify_timeout_s > 0, "task.verify_timeout_s", "must be > 0")
        require(self.max_row_bytes >= 1, "task.max_row_bytes", "must be >= 1")
        if self.verifier not in BUILTIN_METHODS and ":" not in self.verifier:
            raise ConfigError(f"task.verifier: {self.verifier!r}; allowed: math, exact, number or 'module:function'")

    @classmethod
    def from_dict(cls, data: dict) -> "FileTaskConfig":
        """Build from a plain dict (TOML/JSON), rejecting unknown keys by name."""
        return build_config(cls, data, where="task")


_TYPES = {"str": (str, "a string"), "float": ((int, float), "a number"), "int": (int, "an integer")}


def _check_types(cfg: "FileTaskConfig") -> None:
    """Each field's value has its declared type (ConfigError naming `task.<field>` otherwise)."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        kind = str(f.type).replace(" ", "")
        optional = kind.endswith("|None")
        if optional and value is None:
            continue
        base = kind.removesuffix("|None")
        if base.startswith("tuple"):
            ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
            want = "a list of field names"
        elif base in _TYPES:
            types, want = _TYPES[base]
            ok = isinstance(value, types) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            raise ConfigError(f"task.{f.name}: {value!r} is not allowed ({want}{' or none' if optional else ''})")


@dataclass
class LoadReport:
    """What loading one file found: rows read, kept, and bad ones with the first examples."""

    path: str
    rows: int = 0
    kept: int = 0
    bad: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)
    """(row number, 1-based, reason) of the first bad rows."""

    def add_bad(self, row: int, reason: str) -> None:
        self.bad += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append((row, reason))

    @property
    def bad_frac(self) -> float:
        return self.bad / self.rows if self.rows else 0.0

    def summary(self) -> str:
        shown = "; ".join(f"row {r}: {why}" for r, why in self.examples)
        return f"{self.path}: {self.bad} of {self.rows} rows bad ({self.bad_frac:.1%})" + (
            f", e.g. {shown}" if shown else ""
        )


def _read_rows(path: Path, fmt: str, max_rows: int | None, report: LoadReport,
               max_row_bytes: int = 0) -> Iterator[tuple[int, Any]]:
    """(row number, row dict or None when unreadable) for each row; bad JSON is reported here."""
    if fmt == "auto":
        fmt = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "jsonl"
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
            raise DataError(f"{path}: not a readable Parquet file: {exc}") from exc
        for i, row in enumerate(table.to_pylist(), start=1):
            if max_rows is not None and i > max_rows:
                return
            yield i, row
        return
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise DataError(f"{path}: cannot read the data file: {exc.strerror}") from exc
    with fh:
        row_no = 0
        for raw in fh:
            if not raw.strip():
                continue
            row_no += 1
            if max_rows is not None and row_no > max_rows:
                return
            if max_row_bytes and len(raw) > max_row_bytes:
                report.add_bad(row_no, f"line of {len(raw):,} bytes, above task.max_row_bytes={max_row_bytes:,}")
                report.rows += 1
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                report.add_bad(row_no, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
                report.rows += 1
                continue
            try:
                yield row_no, json.loads(line)
            except json.JSONDecodeError as exc:
                report.add_bad(row_no, f"invalid JSON ({exc.msg} at column {exc.colno})")
                report.rows += 1


def _get(row: Any, name: str) -> Any:
    """Field `name` of a row; dotted names reach into nested objects. KeyError when absent."""
    value = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(name)
        value = value[part]
    return value


class FileTask:
    """Prompts from a file (see the module docstring). Loading happens on first use."""

    def __init__(self, cfg: FileTaskConfig):
        self.cfg = cfg
        self.verifier = Verifier(cfg.verifier, cfg.verify_timeout_s)
        self.reports: list[LoadReport] = []
        """One LoadReport per file read (the engine logs them as events)."""

    def _row_prompt(self, row: Any, row_no: int, stem: str) -> Prompt | str:
        """The prompt of one row, or the reason it is bad."""
        cfg = self.cfg
        if not isinstance(row, dict):
            return f"not an object ({type(row).__name__})"
        try:
            text, answer = _get(row, cfg.prompt_field), _get(row, cfg.answer_field)
        except KeyError as exc:
            return f"missing field {exc.args[0]!r}"
        if not isinstance(text, str) or not text.strip():
            return f"field {cfg.prompt_field!r} is empty or not a string"
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str):
            return f"field {cfg.answer_field!r} is not a string or number"
        ref = reference_answer(answer, cfg.answer_extraction)
        if not ref:
            return f"no answer extracted from {cfg.answer_field!r} (extraction {cfg.answer_extraction!r})"
        level = None
        if cfg.level_field is not None:
            try:
                raw = _get(row, cfg.level_field)
                level = int(raw)
                if level != raw and str(level) != str(raw).strip():
                    raise ValueError
            except KeyError:
                return f"missing field {cfg.level_field!r}"
            except (TypeError, ValueError):
                return f"field {cfg.level_field!r} is not an integer level"
        pid = f"{stem}-{row_no:06d}"
        if cfg.id_field is not None:
            try:
                pid = str(_get(row, cfg.id_field))
            except KeyError:
                return f"missing field {cfg.id_field!r}"
        meta: dict[str, Any] = {"row": row_no}
        for name in cfg.metadata_fields:
            try:
                meta[name] = _get(row, name)
            except KeyError:
                pass
        return Prompt(id=pid, text=cfg.template.format(prompt=text), answer=ref, level=level, metadata=meta)

    def _load(self, path_str: str) -> list[Prompt]:
        path = Path(path_str)
        if not path.is_file():
            what = "is a directory, not a data file" if path.is_dir() else "does not exist"
            raise DataError(f"task.path: data file {path} {what}")
        report = LoadReport(str(path))
        prompts, ids = [], set()
        for row_no, row in _read_rows(path, self.cfg.format, self.cfg.max_rows, report, self.cfg.max_row_bytes):
            report.rows += 1
            result = self._row_prompt(row, row_no, path.stem)
            if isinstance(result, Prompt) and result.id in ids:
                result = f"duplicate id {result.id!r}"
            if isinstance(result, str):
                report.add_bad(row_no, result)
                continue
            ids.add(result.id)
            prompts.append(result)
        report.kept = len(prompts)
        self.reports.append(report)
        if report.rows == 0:
            raise DataError(f"{path}: no rows")
        if report.bad_frac > self.cfg.max_bad_frac:
            raise DataError(
                f"{report.summary()}; more than task.max_bad_frac={self.cfg.max_bad_frac:g} "
                f"(check the field mapping: prompt_field={self.cfg.prompt_field!r}, "
                f"answer_field={self.cfg.answer_field!r})"
            )
        return prompts

    @cached_property
    def _splits(self) -> tuple[list[Prompt], list[Prompt]]:
        cfg = self.cfg
        rows = self._load(cfg.path)
        if cfg.eval_path is not None:
            train, evals = rows, self._load(cfg.eval_path)
        else:
            def _held_out(p: Prompt) -> bool:
                h = hashlib.sha256(f"{cfg.seed}:{p.id}".encode()).digest()
                return int.from_bytes(h[:8], "big") / 2**64 < cfg.eval_frac

            train = [p for p in rows if not _held_out(p)]
            evals = [p for p in rows if _held_out(p)]
        return (
            [_with_split(p, "train") for p in train],
            [_with_split(p, "eval") for p in evals],
        )

    def train_prompts(self) -> list[Prompt]:
        return list(self._splits[0])

    def eval_prompts(self) -> list[Prompt]:
        return list(self._splits[1])

    def verify(self, response: str, prompt: Prompt) -> VerifyResult:
        """Judge a response against the prompt's answer (never raises)."""
        return self.verifier(response, prompt.answer, prompt)


def _with_split(p: Prompt, split: str) -> Prompt:
    return Prompt(id=p.id, text=p.text, answer=p.answer, level=p.level, split=split, metadata=p.metadata)
