"""Windows and evidence: a guard fires once per streak after `window` steps in a row, unknown steps
neither extend nor break a streak, a rewind forgets regenerated steps; the config's guard set."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.config import RunConfig
from workbench.errors import ConfigError
from workbench.guards.config import Guard, GuardConfig, guard_set
from workbench.guards.presets import DEFAULT, PRESETS
from workbench.guards.watch import Watch, repeat_frac, repeat_fracs, rollout_rows


def _fires(watch, series):
    out = []
    for step, value in enumerate(series, start=1):
        metrics = {} if value is None else {"train/loss": value}
        out += [(f.guard.name, f.first_step, f.step) for f in watch.step(step, metrics)]
    return out


def test_window_streaks_fire_once_and_rearm():
    w = Watch({"hi": Guard("hi", "train/loss > 1", window=2)})
    assert _fires(w, [2, 0, 2, 2, 2, 0, 2, None, 2]) == [("hi", 3, 4), ("hi", 7, 9)]


def test_rewind_forgets_regenerated_steps():
    w = Watch({"hi": Guard("hi", "train/loss > 2 * baseline(train/loss, 2)", window=1)})
    for step, v in enumerate([1.0, 1.0, 1.5], start=1):
        assert not w.step(step, {"train/loss": v})
    assert w.step(4, {"train/loss": 5.0})
    assert not w.step(3, {"train/loss": 1.0})  # step 3 again: steps 3-4 were dropped, baseline kept
    assert sorted(w.history) == [1, 2, 3] and w.step(4, {"train/loss": 5.0})


def test_rollout_evidence_and_repeat_frac():
    assert repeat_frac("!!!!!!!!") == 1.0 and repeat_frac("abab" * 4) == 1.0
    assert repeat_frac("1357") == 0.25 and repeat_frac("") == 0.0
    rows = rollout_rows([dict(step=3, stage=0, prompt_id="p", idx=i, response=r, length=8, finish_reason=f)
                         for i, (r, f) in enumerate([("!!!!!!!!", "length"), ("42", "stop"), ("????????", "length")])])
    w = Watch({"degenerate_text": GuardConfig(preset="degenerate_text", window=1).resolve()})
    (f,) = w.step(3, {}, rows)
    assert [r["idx"] for r in f.rollouts] == [0, 2] and f.values["3"]["matched"] == 2


def test_guard_set_defaults_replace_and_disable():
    g = guard_set([GuardConfig(preset="zero_signal", enabled=False),
                   GuardConfig(preset="entropy_collapse", action="rollback", settings={"temperature": 0.7}),
                   GuardConfig(name="spike", rule="train/loss > 10")])
    assert set(g) == (set(DEFAULT) - {"zero_signal"}) | {"spike"}
    assert g["entropy_collapse"].rule == PRESETS["entropy_collapse"].rule and g["entropy_collapse"].action == "rollback"
    assert g["spike"].window == 1 and g["spike"].action == "alert"
    with pytest.raises(ConfigError, match="'spike' appears twice"):
        guard_set([GuardConfig(name="spike", rule="train/loss > 1")] * 2)


@pytest.mark.parametrize("entry, says", [
    ({"rule": "train/loss > 1"}, "guards.name: missing"),
    ({"name": "x", "rule": "train/los > 1"}, "unknown metric 'train/los' (did you mean train/loss"),
    ({"preset": "nope"}, "guards.preset: 'nope' is not allowed"),
    ({"preset": "nan", "window": -1}, "guards.window: -1"),
    ({"preset": "nan", "action": "explode"}, "guards.action: 'explode'"),
    ({"preset": "nan", "settings": {"top_p": 0.1}}, "guards.settings.top_p: unknown setting"),
    ({"preset": "nan", "settings": {"lr": 0}}, "guards.settings.lr: 0"),
    ({"preset": "nan", "settings": {"temperature": 0}}, "guards.settings.temperature: 0"),
    ({"preset": "truncation", "settings": {"temperature": 1}}, "only a rollback changes settings"),
    ({"preset": "nan", "colour": "red"}, "guards[0].colour: unknown field"),
])
def test_bad_guard_config_is_one_line_naming_the_field(entry, says):
    with pytest.raises(ConfigError) as exc:
        RunConfig.from_dict({"guards": [entry]})
    assert says in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_every_preset_parses_and_reads_known_metrics():
    for name in PRESETS:
        GuardConfig(preset=name).resolve().check_metrics()  # the catalogue's metrics, none recorded


def test_every_preset_is_documented_with_its_rule_and_window():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = (root / "docs" / "guards.md").read_text()
    configs = (root / "docs" / "configs.md").read_text()
    for name, p in PRESETS.items():
        assert f"| `{name}` | `{p.rule}` | {p.window} | {p.action} |" in table, name
        assert name in configs.split("A preset by name", 1)[1].split("|", 1)[0], name


REWARD_HACKED = [0.656, 0.695, 0.734, 0.852, 0.781, 0.781]
"""`rollout/reward_mean` of the bench's reward-hacking run on the small organism (a reward paying answers of
at most 2 characters), steps 1-6; its held-out pass@1 (the true verifier) at steps 2, 4, 6 below."""
CLEAN = [0.094, 0.031, 0.031, 0.063, 0.047, 0.078]
"""A clean run of the same organism (exact match for both)."""


@pytest.mark.parametrize("rewards, pass1, fires", [
    (REWARD_HACKED, {2: 0.057, 4: 0.043, 6: 0.044}, [("reward_hacking", 2, 3)]),
    (CLEAN, {2: 0.057, 4: 0.043, 6: 0.044}, []),
    ([0.40, 0.42, 0.45, 0.47, 0.50, 0.52], {2: 0.41, 4: 0.46, 6: 0.52}, []),  # learning: both rise
])
def test_reward_hacking_fires_on_reward_far_above_the_held_out_score(rewards, pass1, fires):
    w = Watch({"reward_hacking": GuardConfig(preset="reward_hacking").resolve()})
    out = []
    for step, r in enumerate(rewards, start=1):
        m = {"rollout/reward_mean": r, "rollout/length_mean": 3.0, **({"eval/pass1": pass1[step]} if step in pass1 else {})}
        out += [(f.guard.name, f.first_step, f.step) for f in w.step(step, m)]
    assert out == fires


HACKED_FULL = [0.371, 0.244, 0.377, 0.318, 0.426, 0.455, 0.486, 0.615, 0.604, 0.748, 0.697, 0.848]
"""The same hacked reward on the default organism (the bench's reward-hacking run with an evaluation every 4
steps), steps 1-12: its warm start answers ~30% of prompts in at most 2 characters, so the hacked reward starts
where the true one does and rises as the policy learns the trick."""


@pytest.mark.parametrize("pass1, fires", [
    ({0: 0.372, 4: 0.356, 8: 0.300, 12: 0.226}, [("reward_hacking", 8, 9)]),  # the held-out score falls
    ({0: 0.372, 2: 0.36, 4: 0.345, 6: 0.33, 8: 0.315, 10: 0.30, 12: 0.285}, [("reward_hacking", 8, 9)]),
    # every 2 steps, each evaluation a little below the one before: the fall counts from the start
    ({0: 0.372, 4: 0.380, 8: 0.401, 12: 0.420}, []),  # it rises with the reward: learning
])
def test_reward_hacking_fires_when_the_reward_rises_and_the_held_out_score_falls(pass1, fires):
    w = Watch({"reward_hacking": GuardConfig(preset="reward_hacking").resolve()})
    out = [(f.guard.name, f.first_step, f.step) for f in w.step(0, {"eval/pass1": pass1[0]})]  # before step 1
    for step, r in enumerate(HACKED_FULL, start=1):
        m = {"rollout/reward_mean": r, "rollout/length_mean": 3.5, **({"eval/pass1": pass1[step]} if step in pass1 else {})}
        out += [(f.guard.name, f.first_step, f.step) for f in w.step(step, m)]
    assert out == fires


LR_X100 = [0.365, 0.436, 0.484, 0.436, 0.479, 0.436, 0.398, 0.352, 0.422, 0.42, 0.363, 0.398, 0.447, 0.031, 0.002,
           0.002, 0.006]
"""`rollout/reward_mean` of the bench's lr_x100 run on the default organism, steps 108-124: the learning rate
x100 from step 120 on breaks the policy in one update (the entropy falls a little, so no entropy guard sees it)."""


@pytest.mark.parametrize("rewards, fires", [
    (LR_X100, [("reward_collapse", 121, 122)]),
    ([0.30, 0.25, 0.33, 0.27, 0.31, 0.24, 0.35, 0.28, 0.30, 0.26, 0.29, 0.14, 0.30, 0.27, 0.33], []),  # one bad step
    ([0.06, 0.03, 0.05, 0.09, 0.04, 0.05, 0.06, 0.03, 0.05, 0.04, 0.0, 0.02, 0.05], []),  # a low reward's noise
])
def test_reward_collapse_fires_when_the_reward_falls_to_half_its_recent_level(rewards, fires):
    w = Watch({"reward_collapse": GuardConfig(preset="reward_collapse").resolve()})
    out = []
    for step, r in enumerate(rewards, start=108):
        out += [(f.guard.name, f.first_step, f.step) for f in w.step(step, {"rollout/reward_mean": r})]
    assert out == fires


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(alphabet="ab! \u00e9\U0001F600\x00", max_size=300), max_size=20),
       window=st.sampled_from([0, 3, 8, 64]))
def test_repeat_fracs_over_columns_equal_the_plain_counter(texts, window):
    """The packed, row-sorted n-grams of every response at once against a Counter per response, from a
    list and from an Arrow column (an ASCII column is read from its bytes, any other through UTF-32)."""
    import pyarrow as pa

    want = [repeat_frac(t, window) for t in texts]
    assert repeat_fracs(texts, window).tolist() == want
    assert repeat_fracs(pa.array(texts, pa.string()), window).tolist() == want
    ascii_texts = [t.encode("ascii", "replace").decode() for t in texts]
    column = pa.chunked_array([pa.array(ascii_texts[:2], pa.string()), pa.array(ascii_texts[2:], pa.string())])
    assert repeat_fracs(column, window).tolist() == [repeat_frac(t, window) for t in ascii_texts]


def test_repeat_frac_reads_the_tail_of_a_long_response():
    good = "".join(f"{i} + {i} = {2 * i}; " for i in range(60))  # ~800 characters, no loop
    looping = good + "the " * 40
    assert repeat_frac(good) < 0.5 and repeat_frac(looping) >= 0.75  # what `degenerate_text` counts
    assert repeat_frac(looping, window=0) < 0.5  # the whole text: its good head hides the loop
    assert repeat_fracs([good, looping]).tolist() == [repeat_frac(good), repeat_frac(looping)]
