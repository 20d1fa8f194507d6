"""Runs of one name get distinct labels (the Compare page keys its curves by label: equal labels
would overwrite one run's curves with the other's)."""

from workbench.analysis.frames import pick_runs
from workbench.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun


def test_runs_of_one_name_get_distinct_labels(tmp_path):
    with open_store(tmp_path / "store") as store:
        ids = [store.create_run("organism-uniform", {"allocator": {"name": "uniform"}}, seed=0) for _ in range(2)]
        for rid in ids:
            store.write_step(SyntheticRun(rid, Shape(prompts_per_step=2, rollouts_per_prompt=2, tokens=4, prompt_pool=8), seed=0).step(0))
        labels = pick_runs(store, ids)["label"].to_list()
    assert len(set(labels)) == 2
    assert all(label.startswith("organism-uniform · uniform · ") for label in labels)
    # the id's time and random suffix, not its first characters (which are the name again)
    assert [label.rsplit(" · ", 1)[1] for label in labels] == ["-".join(rid.rsplit("-", 3)[2:]) for rid in ids]
