"""File data sets: field mapping, answer extraction, bad rows, splits, and the GSM8K test split."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.errors import ConfigError, DataError
from workbench.tasks import FileTaskConfig, get_task, verify
from workbench.tasks.extract import final_answer, reference_answer

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def _rows(n_good: int, bad: list[object]) -> list[object]:
    rows = [
        {"q": f"What is {i} + {i}?", "sol": f"{i} + {i} = {2 * i}\n#### {2 * i:,}", "uid": f"r{i}",
         "meta": {"difficulty": i % 3, "source": "made"}}
        for i in range(n_good)
    ]
    return rows + bad


BAD_ROWS = [
    {"q": "no answer field"},
    {"q": "", "sol": "#### 1"},
    {"q": "no marker", "sol": "the answer is one"},
    {"q": "dup", "sol": "#### 1", "uid": "r0", "meta": {"difficulty": 1}},
    {"q": "level not int", "sol": "#### 2", "uid": "x", "meta": {"difficulty": "hard"}},
]


def _write_jsonl(path: Path, rows: list[object], broken_lines: int = 0) -> Path:
    lines = [json.dumps(r) for r in rows] + ["{not json"] * broken_lines
    path.write_text("\n".join(lines) + "\n")
    return path


def _cfg(path: Path, **kw) -> FileTaskConfig:
    base = dict(path=str(path), prompt_field="q", answer_field="sol", id_field="uid",
                level_field="meta.difficulty", metadata_fields=("meta.source",), answer_extraction="gsm8k")
    base.update(kw)
    return FileTaskConfig(**base)


def test_bad_rows_are_skipped_counted_and_reported(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(200, BAD_ROWS), broken_lines=1)
    task = get_task(_cfg(path))
    prompts = task.train_prompts() + task.eval_prompts()
    assert len(prompts) == 200
    report = task.reports[0]
    assert (report.rows, report.kept, report.bad) == (206, 200, 6)
    reasons = dict(report.examples)
    assert "missing field 'sol'" in reasons[201]
    assert "empty" in reasons[202]
    assert "no answer extracted" in reasons[203]
    assert "duplicate id 'r0'" in reasons[204]
    assert "not an integer level" in reasons[205]
    assert len(report.examples) == 5  # first five kept as examples; row 206 (bad JSON) only counted


def test_too_many_bad_rows_refuse_naming_rows(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(20, BAD_ROWS))
    with pytest.raises(DataError, match=r"5 of 25 rows bad \(20\.0%\), e\.g\. row 21: missing field 'sol'"):
        get_task(_cfg(path)).train_prompts()
    # a looser threshold accepts the same file
    assert len(get_task(_cfg(path, max_bad_frac=0.5)).train_prompts()) > 0


def test_wrong_mapping_refuses(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(50, []))
    with pytest.raises(DataError, match="prompt_field='question'"):
        get_task(FileTaskConfig(path=str(path))).train_prompts()


def test_mapping_levels_metadata_and_parquet(tmp_path):
    rows = _rows(60, [])
    flat = [{"q": r["q"], "sol": r["sol"], "uid": r["uid"], "meta": r["meta"]} for r in rows]
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "d.parquet")
    jsonl = get_task(_cfg(_write_jsonl(tmp_path / "d.jsonl", rows), eval_frac=0.0)).train_prompts()
    parquet = get_task(_cfg(tmp_path / "d.parquet", eval_frac=0.0)).train_prompts()
    assert [(p.id, p.text, p.answer, p.level) for p in jsonl] == [(p.id, p.text, p.answer, p.level) for p in parquet]
    p = jsonl[12]
    assert (p.id, p.answer, p.level, p.metadata["meta.source"]) == ("r12", "24", 0, "made")
    assert jsonl[-1].answer == "118"


def test_split_is_deterministic_and_disjoint(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(300, []))
    a, b = get_task(_cfg(path, eval_frac=0.2)), get_task(_cfg(path, eval_frac=0.2))
    assert [p.id for p in a.eval_prompts()] == [p.id for p in b.eval_prompts()]
    train_ids, eval_ids = {p.id for p in a.train_prompts()}, {p.id for p in a.eval_prompts()}
    assert not train_ids & eval_ids and len(train_ids | eval_ids) == 300
    assert 30 <= len(eval_ids) <= 90


def test_eval_path_and_template(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", _rows(30, []))
    evals = _write_jsonl(tmp_path / "eval.jsonl", _rows(10, []))
    task = get_task(_cfg(train, eval_path=str(evals), template="Q: {prompt}\nA:"))
    assert len(task.train_prompts()) == 30 and len(task.eval_prompts()) == 10
    assert task.eval_prompts()[0].text == "Q: What is 0 + 0?\nA:"
    assert task.verify("so 2 + 2 = 4", task.eval_prompts()[2]).reward == 1.0


def test_missing_file_and_bad_config(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        get_task(FileTaskConfig(path=str(tmp_path / "nope.jsonl"))).train_prompts()
    with pytest.raises(ConfigError, match="task.answer_extraction"):
        FileTaskConfig(path="x.jsonl", answer_extraction="magic")
    with pytest.raises(ConfigError, match="task.max_bad_frac"):
        FileTaskConfig(path="x.jsonl", max_bad_frac=2)
    with pytest.raises(ConfigError, match=r"task\.answer_feild: unknown field"):
        FileTaskConfig.from_dict({"path": "x.jsonl", "answer_feild": "a"})


@pytest.mark.parametrize(
    "text, mode, expected",
    [
        ("a\n#### 1,200", "gsm8k", "1,200"),
        ("no marker", "gsm8k", None),
        ("so \\boxed{\\frac{1}{2}} and \\boxed{3}", "boxed", "3"),
        ("\\boxed{\\{1, \\{2\\}\\}}", "boxed", "\\{1, \\{2\\}\\}"),
        ("plain 7", "auto", "plain 7"),
        ("  7  ", "none", "7"),
    ],
)
def test_reference_extraction(text, mode, expected):
    assert reference_answer(text, mode) == expected


def test_final_answer_precedence():
    assert final_answer("#### 3 but \\boxed{4}") == "4"
    assert final_answer("answer: 5\nA: 6") == "5"
    assert final_answer("we get 1 then 2.") == "2"
    assert final_answer("") is None


@pytest.mark.skipif(not GSM8K.is_file(), reason="GSM8K test data not present")
def test_gsm8k_rows_load_and_references_verify_against_themselves():
    task = get_task(FileTaskConfig(path=str(GSM8K)))
    prompts = task.train_prompts() + task.eval_prompts()
    assert len(prompts) == 1319 and task.reports[0].bad == 0
    raw = [json.loads(line) for line in GSM8K.read_text().splitlines() if line.strip()]
    by_row = {p.metadata["row"]: p for p in prompts}
    failures = [
        i for i, row in enumerate(raw, start=1)
        if verify(row["answer"], by_row[i].answer, "math").reward != 1.0
    ]
    assert failures == []
    wrong = [p for p in prompts[:200] if verify(f"#### {p.answer}1", p.answer, "math").reward != 0.0]
    assert wrong == []
