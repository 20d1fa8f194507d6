"""Writes the analysis notebooks (entropy, pass@k, allocators) with nbformat, outputs empty.

The notebooks are generated so that their committed form never carries outputs and their cells stay
reviewable as plain Python here. Edit this file, then run `python notebooks/build.py`; the tests check
that the committed notebooks match it and hold no outputs.

Every notebook has one cell tagged "parameters" (papermill's convention): the store path (default:
$WORKBENCH_STORE, which `workbench notebooks` sets, else the repository's `store/`) and the run ids
(default: the latest runs in the store). To run one headless with other values, insert a cell after
the tagged one that assigns them (what papermill and the tests do).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

PARAMETERS = '''\
import os

store_path = os.environ.get("WORKBENCH_STORE", "../store")  # the store directory
run_ids = []  # run ids to analyse; empty: the latest runs in the store
latest = 4  # how many of the latest runs when run_ids is empty'''

SETUP = '''\
import plotly.express as px
import plotly.io as pio
import polars as pl

import workbench.analysis as wa
from workbench.analysis.frames import pick_runs, run_rollouts, stack, with_labels
from workbench.store import open_store

# JupyterLab draws the first; the second (HTML with plotly.js embedded once, in the first chart's cell)
# keeps the charts when the notebook is exported to HTML and opened with no network
pio.renderers.default = "plotly_mimetype+notebook"

store = open_store(store_path, read_only=True)
runs = pick_runs(store, run_ids, latest=latest)
runs'''


def entropy() -> list:
    return [
        new_markdown_cell(
            "# Entropy over training\n\n"
            "Token entropy (nats) of the distribution each response token was sampled from, for the chosen "
            "runs: its course over training and whether it collapsed, correct vs wrong rollouts, entropy "
            "per token position, the high-entropy *forking* tokens, and the runs compared by allocator.\n\n"
            "Set the store and the runs in the next cell (tagged `parameters`)."),
        new_code_cell(PARAMETERS + "\ntop_frac = 0.2  # share of highest-entropy tokens counted as forking"
                      "\ncollapse_fraction = 0.5  # collapsed: below this share of the initial entropy"
                      "\ncollapse_patience = 5  # ... for this many consecutive steps"
                      "\nstep_range = (None, None)  # (first, last) step to read; None: unbounded (token arrays are big)",
                      metadata={"tags": ["parameters"]}),
        new_code_cell(SETUP),
        new_code_cell(
            "cols = [\"step\", \"stage\", \"prompt_id\", \"idx\", \"reward\", \"correct\", \"length\", \"token_ids\",\n"
            "        \"token_entropy\"]\n"
            "rollouts = stack(store, runs, lambda s, r: run_rollouts(s, r, columns=cols, step_min=step_range[0],\n"
            "                                                     step_max=step_range[1]))\n"
            "print(f\"{rollouts.height:,} rollouts from {runs.height} run(s)\")"),
        new_markdown_cell("## Entropy over training\nToken-weighted mean per step, with the 10%–90% band of "
                          "token entropies."),
        new_code_cell(
            "per_step = with_labels(wa.entropy_by_step(rollouts, by=(\"run_id\", \"step\")), runs)\n"
            "fig = px.line(per_step, x=\"step\", y=\"entropy_mean\", color=\"label\",\n"
            "              labels={\"entropy_mean\": \"entropy (nats)\"}, title=\"Mean token entropy per step\")\n"
            "for trace in px.line(per_step, x=\"step\", y=\"entropy_q90\", color=\"label\").data:\n"
            "    trace.update(line={\"dash\": \"dot\", \"width\": 1}, showlegend=False, name=trace.name + \" q90\")\n"
            "    fig.add_trace(trace)\n"
            "fig"),
        new_markdown_cell("## Collapse detection\nA run has collapsed when its mean entropy stays below "
                          "`collapse_fraction` of its initial value for `collapse_patience` consecutive steps."),
        new_code_cell(
            "collapse = with_labels(wa.detect_entropy_collapse(per_step, fraction=collapse_fraction,\n"
            "                                                  patience=collapse_patience), runs)\n"
            "for row in collapse.filter(pl.col(\"collapsed\")).iter_rows(named=True):\n"
            "    fig.add_vline(x=row[\"collapse_step\"], line_dash=\"dash\", annotation_text=f\"collapse: {row['label']}\")\n"
            "collapse.select(\"label\", \"initial\", \"final\", \"collapsed\", \"collapse_step\", \"detected_step\")"),
        new_markdown_cell("## Entropy of correct vs wrong rollouts"),
        new_code_cell(
            "by_correct = with_labels(wa.entropy_by_correctness(rollouts), runs).with_columns(\n"
            "    pl.when(pl.col(\"correct\")).then(pl.lit(\"correct\")).otherwise(pl.lit(\"wrong\")).alias(\"outcome\"))\n"
            "px.line(by_correct, x=\"step\", y=\"entropy_mean\", color=\"label\", line_dash=\"outcome\",\n"
            "        labels={\"entropy_mean\": \"entropy (nats)\"}, title=\"Entropy of correct and wrong rollouts\")"),
        new_markdown_cell("## Entropy per token position\nEarly (first third of the run's steps) against late "
                          "(last third)."),
        new_code_cell(
            "phased = rollouts.with_columns(\n"
            "    ((pl.col(\"step\") - pl.col(\"step\").min().over(\"run_id\")) * 3\n"
            "     // (pl.col(\"step\").max().over(\"run_id\") - pl.col(\"step\").min().over(\"run_id\") + 1))\n"
            "    .replace_strict({0: \"early\", 1: \"middle\", 2: \"late\"}, return_dtype=pl.String).alias(\"phase\"))\n"
            "by_pos = with_labels(pl.concat([\n"
            "    wa.entropy_by_position(phased.filter(pl.col(\"phase\") == phase)).with_columns(pl.lit(phase).alias(\"phase\"))\n"
            "    for phase in (\"early\", \"late\")]), runs)\n"
            "px.line(by_pos, x=\"position\", y=\"entropy_mean\", color=\"label\", line_dash=\"phase\", markers=True,\n"
            "        labels={\"position\": \"token position (0 = first generated)\", \"entropy_mean\": \"entropy (nats)\"},\n"
            "        title=\"Entropy by token position, early vs late in training\")"),
        new_markdown_cell("## Forking tokens\nThe `top_frac` highest-entropy tokens of each run: where responses "
                          "branch. Which token ids they are, and where in the response they sit."),
        new_code_cell(
            "forks = wa.forking_tokens(rollouts, top_frac=top_frac)\n"
            "# each run's tokens as text, with its own tokenizer (a subword model's ' the' shows as '\u2423the')\n"
            "counts = with_labels(pl.concat([\n"
            "    wa.forking_token_counts(forks.filter(pl.col(\"run_id\") == r), decode=wa.token_text(store, r))\n"
            "    for r in forks[\"run_id\"].unique(maintain_order=True)]\n"
            "    or [wa.forking_token_counts(forks).with_columns(text=pl.lit(\"\"))], how=\"diagonal\"), runs)\n"
            "px.bar(counts.group_by(\"label\").head(15), x=\"text\", y=\"share\", color=\"label\", barmode=\"group\",\n"
            "       hover_data=[\"token_id\", \"count\", \"entropy_mean\"],\n"
            "       title=f\"Most frequent forking tokens (top {top_frac:.0%} entropy)\")"),
        new_code_cell(
            "px.histogram(with_labels(forks, runs), x=\"position\", color=\"label\", barmode=\"group\",\n"
            "             histnorm=\"probability\", title=\"Where forking tokens sit in the response\")"),
        new_markdown_cell("## Compared across allocators\nMean entropy over the first and last 10% of each run's "
                          "steps, and how often forking tokens occur in correct rollouts."),
        new_code_cell(
            "span = per_step.group_by(\"run_id\").agg(pl.col(\"step\").min().alias(\"s0\"), pl.col(\"step\").max().alias(\"s1\"))\n"
            "ends = (per_step.join(span, on=\"run_id\")\n"
            "        .with_columns(((pl.col(\"step\") - pl.col(\"s0\")) / (pl.col(\"s1\") - pl.col(\"s0\") + 1)).alias(\"f\"))\n"
            "        .group_by(\"label\", \"allocator\")\n"
            "        .agg(pl.col(\"entropy_mean\").filter(pl.col(\"f\") < 0.1).mean().alias(\"entropy_start\"),\n"
            "             pl.col(\"entropy_mean\").filter(pl.col(\"f\") >= 0.9).mean().alias(\"entropy_end\"))\n"
            "        .join(collapse.select(\"label\", \"collapsed\"), on=\"label\").sort(\"allocator\", \"label\"))\n"
            "fork_correct = with_labels(forks.group_by(\"run_id\").agg(pl.col(\"correct\").mean()\n"
            "                                                        .alias(\"forks_in_correct\")), runs)\n"
            "ends = ends.join(fork_correct.select(\"label\", \"forks_in_correct\"), on=\"label\", how=\"left\")\n"
            "ends"),
        new_code_cell(
            "px.bar(ends.unpivot(index=[\"label\", \"allocator\"], on=[\"entropy_start\", \"entropy_end\"]),\n"
            "       x=\"label\", y=\"value\", color=\"variable\", barmode=\"group\", hover_data=[\"allocator\"],\n"
            "       labels={\"value\": \"entropy (nats)\"}, title=\"Entropy at the start and end of each run\")"),
        new_markdown_cell("## Around tool calls (episodes)\nARPO's observation (Dong et al. 2025): the entropy of the "
                          "first tokens the model writes after a tool result, against its episode's first turn. "
                          "Above 0 the model is less sure after reading the tool's feedback: where ARPO branches. "
                          "Runs without episodes (`rollout.shape = \"episodes\"` records them) have no rows here."),
        new_code_cell(
            "from workbench.analysis.episodes import entropy_after_tools\n\n"
            "after_k = 10  # tokens after the result, and of the first turn\n"
            "turns = stack(store, runs, lambda st, rid: st.episode_turns(rid) if st.has_episodes(rid) else pl.DataFrame())\n"
            "around = entropy_after_tools(turns, k=after_k) if turns.height else pl.DataFrame()\n"
            "if around.is_empty():\n"
            "    print(\"no episode in these runs read a tool result\")\n"
            "else:\n"
            "    around = with_labels(around.drop(\"label\", \"allocator\", strict=False), runs)\n"
            "    summary = around.group_by(\"label\").agg(pl.len().alias(\"turns_after_a_tool\"),\n"
            "                                              pl.col(\"dh\").median().alias(\"dh_median\"),\n"
            "                                              (pl.col(\"dh\") > 0).mean().alias(\"share_above_0\"))\n"
            "    display(summary)\n"
            "    display(px.histogram(around, x=\"dh\", color=\"label\", barmode=\"overlay\", nbins=40,\n"
            "                         labels={\"dh\": f\"entropy after a tool result - first turn's (first {after_k} tokens, nats)\"},\n"
            "                         title=\"Entropy after tool results, over episodes\"))\n"
            "    per = around.group_by(\"label\", \"step\").agg(pl.col(\"dh\").median()).sort(\"step\")\n"
            "    display(px.line(per, x=\"step\", y=\"dh\", color=\"label\", labels={\"dh\": \"median (nats)\"},\n"
            "                    title=\"Entropy after tool results over training (median per step)\"))"),
    ]


def pass_at_k() -> list:
    return [
        new_markdown_cell(
            "# pass@k over training\n\n"
            "From the runs' evaluations (held-out prompts, `samples` draws each): the unbiased pass@k "
            "for k = 1..n, over training with bootstrap confidence intervals over prompts, and whether RL "
            "*sharpened* the policy (pass@1 up while pass@n stays, i.e. pass@k compressed into pass@1) or "
            "*gained capability* (prompts newly solved even at large k), by difficulty level.\n\n"
            "Set the store and the runs in the next cell (tagged `parameters`)."),
        new_code_cell(PARAMETERS + "\nn_boot = 500  # bootstrap resamples for the intervals\nci = 0.95",
                      metadata={"tags": ["parameters"]}),
        new_code_cell(SETUP),
        new_code_cell(
            "evals = with_labels(stack(store, runs, lambda s, r: s.evals(r)).drop(\"label\", \"allocator\", strict=False), runs)\n"
            "if evals.height == 0:\n"
            "    raise RuntimeError(\"these runs logged no evaluations (eval.every = 0?); pick other runs\")\n"
            "n = int(evals[\"samples\"].min())\n"
            "ks = sorted({1, *[2 ** i for i in range(1, 16) if 2 ** i < n], n})\n"
            "print(f\"{evals.height:,} evaluation rows; samples per prompt: {n}; k in {ks}\")\n"
            "evals.group_by(\"label\").agg(pl.col(\"step\").unique().sort().alias(\"eval steps\"))"),
        new_markdown_cell("## pass@k against k\nAt the first and the last evaluation of each run."),
        new_code_cell(
            "by_k = with_labels(wa.pass_at_k_by_k(evals.drop(\"label\", \"allocator\")), runs)\n"
            "bounds = by_k.group_by(\"run_id\").agg(pl.col(\"step\").min().alias(\"first\"), pl.col(\"step\").max().alias(\"last\"))\n"
            "ends = by_k.join(bounds, on=\"run_id\").filter((pl.col(\"step\") == pl.col(\"first\")) | (pl.col(\"step\") == pl.col(\"last\")))\n"
            "ends = ends.with_columns(pl.when(pl.col(\"step\") == pl.col(\"first\")).then(pl.lit(\"first eval\"))\n"
            "                         .otherwise(pl.lit(\"last eval\")).alias(\"when\"))\n"
            "px.line(ends, x=\"k\", y=\"pass_at_k\", color=\"label\", line_dash=\"when\", markers=True, log_x=True,\n"
            "        labels={\"pass_at_k\": \"pass@k\"}, title=\"pass@k against k, first vs last evaluation\")"),
        new_markdown_cell("## pass@k over training\nMean over prompts with a bootstrap interval (resampling prompts)."),
        new_code_cell(
            "curve_ks = sorted({1, ks[len(ks) // 2], n})\n"
            "curve = with_labels(wa.pass_at_k_curve(evals.drop(\"label\", \"allocator\"), curve_ks, n_boot=n_boot, ci=ci), runs)\n"
            "curve = curve.with_columns((pl.col(\"ci_high\") - pl.col(\"pass_at_k\")).alias(\"plus\"),\n"
            "                           (pl.col(\"pass_at_k\") - pl.col(\"ci_low\")).alias(\"minus\"),\n"
            "                           (\"pass@\" + pl.col(\"k\").cast(pl.String)).alias(\"metric\"))\n"
            "px.line(curve, x=\"step\", y=\"pass_at_k\", color=\"label\", line_dash=\"metric\", error_y=\"plus\",\n"
            "        error_y_minus=\"minus\", markers=True, labels={\"pass_at_k\": \"pass@k\"},\n"
            "        title=f\"pass@k over training ({ci:.0%} bootstrap intervals)\")"),
        new_code_cell(
            "by_level = wa.pass_at_k_curve(evals.drop(\"label\", \"allocator\").with_columns(pl.col(\"level\").fill_null(-1)),\n"
            "                              [1, n], by=(\"run_id\", \"level\", \"step\"), n_boot=n_boot, ci=ci)\n"
            "by_level = with_labels(by_level, runs).with_columns((\"pass@\" + pl.col(\"k\").cast(pl.String)).alias(\"metric\"))\n"
            "px.line(by_level, x=\"step\", y=\"pass_at_k\", color=\"label\", line_dash=\"metric\", facet_col=\"level\",\n"
            "        markers=True, labels={\"pass_at_k\": \"pass@k\"}, title=\"pass@1 and pass@n by difficulty level\")"),
        new_markdown_cell(
            "## Sharpening or capability gain?\n"
            "Per prompt, first vs last evaluation. *Newly solved*: no correct sample at first, some at last "
            "(capability gain). *Lost*: the reverse. If pass@1 rises while pass@n does not, RL compressed "
            "pass@k into pass@1 (sharpening) rather than teaching new prompts."),
        new_code_cell(
            "scored = wa.with_pass_at_k(evals, [1, n]).join(bounds, on=\"run_id\")\n"
            "first = scored.filter(pl.col(\"step\") == pl.col(\"first\")).select(\"run_id\", \"prompt_id\", \"level\",\n"
            "    pl.col(\"pass@1\").alias(\"p1_first\"), pl.col(f\"pass@{n}\").alias(\"pn_first\"), pl.col(\"correct\").alias(\"c_first\"))\n"
            "last = scored.filter(pl.col(\"step\") == pl.col(\"last\")).select(\"run_id\", \"prompt_id\",\n"
            "    pl.col(\"pass@1\").alias(\"p1_last\"), pl.col(f\"pass@{n}\").alias(\"pn_last\"), pl.col(\"correct\").alias(\"c_last\"))\n"
            "change = first.join(last, on=[\"run_id\", \"prompt_id\"])\n"
            "gain = with_labels(change.group_by(\"run_id\", \"level\").agg(\n"
            "    pl.len().alias(\"prompts\"),\n"
            "    (pl.col(\"p1_last\") - pl.col(\"p1_first\")).mean().alias(\"delta_pass@1\"),\n"
            "    (pl.col(\"pn_last\") - pl.col(\"pn_first\")).mean().alias(f\"delta_pass@{n}\"),\n"
            "    ((pl.col(\"c_first\") == 0) & (pl.col(\"c_last\") > 0)).sum().alias(\"newly_solved\"),\n"
            "    ((pl.col(\"c_first\") > 0) & (pl.col(\"c_last\") == 0)).sum().alias(\"lost\"),\n"
            "), runs).sort(\"label\", \"level\")\n"
            "gain"),
        new_code_cell(
            "px.bar(gain.unpivot(index=[\"label\", \"level\"], on=[\"delta_pass@1\", f\"delta_pass@{n}\"]),\n"
            "       x=\"level\", y=\"value\", color=\"variable\", barmode=\"group\", facet_col=\"label\",\n"
            "       labels={\"value\": \"change, last - first eval\"},\n"
            "       title=\"Sharpening (pass@1 up, pass@n flat) vs capability gain (pass@n up), by level\")"),
    ]


def allocators() -> list:
    return [
        new_markdown_cell(
            "# Allocators: efficiency and what-if replay\n\n"
            "How much of each run's rollout budget produced a learning signal (a group whose rewards vary), "
            "where the rollouts went against prompt difficulty, and a *what-if replay*: other allocators "
            "run over a finished run's logged per-prompt outcomes, to estimate what they would have spent and "
            "how many informative groups they would have found (see `docs/analysis.md` for its limits).\n\n"
            "Set the store, the runs and the replayed allocators in the next cell (tagged `parameters`)."),
        new_code_cell(
            PARAMETERS + "\nreplay_run_id = None  # the run to replay; None: the first of the runs\n"
            "replay_allocators = {  # label -> (allocator, parameters)\n"
            "    \"uniform\": (\"uniform\", {}),\n"
            "    \"dynamic_sampling\": (\"dynamic_sampling\", {}),\n"
            "    \"selective\": (\"selective\", {}),\n"
            "    \"multistage\": (\"multistage\", {}),\n"
            "    \"until_correct\": (\"until_correct\", {}),\n"
            "}  # knapsack, uncertainty, adaptive_stop, value_tracker, rank_proportional work too (knapsack is slow)\n"
            "replay_seeds = 2  # replays per allocator (different draws)\n"
            "replay_budget = None  # rollouts per step for the replays; None: the run's logged budget\n"
            "compare_basis = \"end\"  # prompt by prompt: \"end\", \"step\" or \"tokens\" (the runs' common point)\n"
            "compare_window = None  # steps around the point; None: enough for the prompt pool to come round twice",
            metadata={"tags": ["parameters"]}),
        new_code_cell(SETUP + "\nfrom workbench.analysis.replay import compare_allocators, load_run, logged_result, replay_run"),
        new_code_cell(
            "rollouts = stack(store, runs, lambda s, r: run_rollouts(s, r, columns=[\"step\", \"stage\", \"prompt_id\", \"idx\",\n"
            "                                                                      \"reward\", \"length\", \"off_policy\"]))\n"
            "rollouts = rollouts.filter(~pl.col(\"off_policy\").fill_null(False))\n"
            "allocations = stack(store, runs, lambda s, r: s.allocations(r))\n"
            "print(f\"{rollouts.height:,} on-policy rollouts, {allocations.height:,} allocation decisions\")"),
        new_markdown_cell("## Efficiency per run\nZero-signal groups carry no GRPO gradient; informative rollouts "
                          "per 1,000 is the headline figure."),
        new_code_cell(
            "eff = with_labels(wa.allocation_efficiency(rollouts.drop(\"label\", \"allocator\")), runs)\n"
            "eff.select(\"label\", \"allocator\", \"groups\", \"zero_signal_frac\", \"all_correct_groups\", \"all_wrong_groups\",\n"
            "           \"rollouts\", \"informative_rollouts\", \"informative_per_1000\")"),
        new_code_cell(
            "px.bar(eff, x=\"label\", y=\"informative_per_1000\", color=\"allocator\",\n"
            "       title=\"Informative rollouts per 1,000 generated\")"),
        new_code_cell(
            "zs = with_labels(wa.zero_signal_by_step(rollouts.drop(\"label\", \"allocator\")), runs)\n"
            "px.line(zs, x=\"step\", y=\"zero_signal_frac\", color=\"label\", title=\"Zero-signal group fraction per step\")"),
        new_markdown_cell("## Where the rollouts went\nRollouts per prompt against the pass rate the allocator "
                          "predicted when it decided (the posterior mean), and stages per step."),
        new_code_cell(
            "by_diff = with_labels(wa.rollouts_by_difficulty(rollouts.drop(\"label\", \"allocator\"),\n"
            "                                                allocations.drop(\"label\", \"allocator\"), difficulty=\"predicted\"), runs)\n"
            "px.line(by_diff, x=\"bin_low\", y=\"rollouts_per_prompt\", color=\"label\", markers=True,\n"
            "        hover_data=[\"groups\", \"zero_signal_frac\"],\n"
            "        labels={\"bin_low\": \"predicted pass rate (bin start)\"}, title=\"Rollouts per prompt against difficulty\")"),
        new_code_cell(
            "grants = with_labels(wa.grants_by_step(allocations.drop(\"label\", \"allocator\")), runs)\n"
            "px.line(grants, x=\"step\", y=\"granted\", color=\"label\", hover_data=[\"prompts\", \"stages\", \"topped_up_prompts\"],\n"
            "        title=\"Rollouts granted per step\")"),
        new_markdown_cell(
            "## What-if replay\n"
            "Each allocator is run over the chosen run's steps; its grants are served by drawing from the "
            "prompt's observed rewards at that step. First a check: the run's own allocator, replayed with "
            "the run's seed and logged parameters, should reproduce the logged decisions.\n\n"
            "A run imported from another engine (verl, TRL, NeMo-RL: `workbench import`) logged no allocation "
            "decisions: its steps are told by its rollouts (each prompt's group one grant of the rollouts it "
            "got, the step's budget the rollouts it generated), and the replay answers what each of our "
            "allocators would have spent, and found, on that run's outcomes. Set `replay_run_id` to its id."),
        new_code_cell(
            "target = replay_run_id or runs[\"run_id\"][0]\n"
            "frames = load_run(store, target)\n"
            "source = store.run(target).get(\"source\")\n"
            "if source:\n"
            "    print(f\"run {target[:8]} was imported from {source}: no allocation decisions logged, so no allocator of \"\n"
            "          f\"ours to reproduce; its {frames.allocations.height} groups over \"\n"
            "          f\"{frames.allocations['step'].n_unique()} steps are the 'logged' row below\")\n"
            "else:\n"
            "    own = replay_run(store, target, frames=frames)\n"
            "    key = [\"step\", \"stage\", \"prompt_id\", \"granted\"]\n"
            "    logged = frames.allocations.select(key).sort(key)\n"
            "    same = own.grants.select(key).sort(key).equals(logged)\n"
            "    print(f\"run {target[:8]} ({frames.allocator} {frames.params}): own-allocator replay reproduces the \"\n"
            "          f\"logged grants: {same} ({own.grants.height} replayed vs {logged.height} logged decisions)\")"),
        new_code_cell(
            "table = compare_allocators(store, target, replay_allocators, seeds=replay_seeds, budget=replay_budget)\n"
            "if source:\n"
            "    table = table.with_columns(pl.when(pl.col(\"label\") == \"logged\").then(pl.lit(source))\n"
            "                               .otherwise(pl.col(\"allocator\")).alias(\"allocator\"))\n"
            "summary = (table.group_by(\"label\", maintain_order=True)\n"
            "           .agg(pl.col(\"rollouts\").mean(), pl.col(\"tokens\").mean().alias(\"generated_tokens\"),\n"
            "                pl.col(\"informative_groups\").mean(),\n"
            "                pl.col(\"informative_groups\").std().alias(\"informative_sd\"),\n"
            "                pl.col(\"informative_per_1k\").mean(), pl.col(\"zero_signal_frac\").mean(),\n"
            "                pl.col(\"observed_frac\").mean()))\n"
            "summary"),
        new_code_cell(
            "px.scatter(summary, x=\"rollouts\", y=\"informative_groups\", color=\"label\", error_y=\"informative_sd\",\n"
            "           hover_data=[\"generated_tokens\", \"informative_per_1k\", \"zero_signal_frac\", \"observed_frac\"],\n"
            "           labels={\"rollouts\": \"rollouts spent (whole run)\", \"informative_groups\": \"informative groups found\"},\n"
            "           title=f\"What-if replay over run {target[:8]}: spend vs informative groups\")"),
        new_markdown_cell("`observed_frac` is the share of replayed rollouts served from the step's own logged "
                          "outcomes; the rest were resampled, borrowed from the prompt's nearest step, or drawn "
                          "from its posterior, and deserve less trust."),
        *prompt_by_prompt(),
    ]


def prompt_by_prompt() -> list:
    """The allocators notebook's last section: the runs compared prompt by prompt."""
    return [
        new_markdown_cell(
            "## Prompt by prompt\n"
            "Which prompts did each run learn that the first (A) never did, and which did it lose? "
            "`compare_runs` puts every run at a common point (`compare_basis`: each run's end, the same "
            "step, or the same generated tokens), counts each prompt's correct rollouts in a window of steps "
            "around it, and compares each run with A: `diff_B` = B's pass rate − A's with a 95% Newcombe "
            "interval, and `change_B`, a label read from that interval. Prompts are matched by their text, "
            "so an imported run lines up with ours. With one run, its first quarter is compared with its end."),
        new_code_cell(
            "ids = runs[\"run_id\"].to_list()\n"
            "if len(ids) >= 2:\n"
            "    cmp = wa.compare_runs(store, ids, basis=compare_basis, window=compare_window,\n"
            "                          labels=runs[\"label\"].to_list())\n"
            "else:\n"
            "    last = store.run_steps(ids[0])[\"step\"]\n"
            "    cmp = wa.compare_steps(store, ids[0], int(last.quantile(0.25, \"nearest\")), int(last.max()),\n"
            "                           window=compare_window)\n"
            "cmp.sides.select(\"letter\", \"label\", \"step\", \"step_min\", \"step_max\", \"tokens\", \"prompts\",\n"
            "                 \"match_rate\", \"matched_by\")"),
        new_code_cell(
            "b = cmp.sides[\"letter\"][1]  # the run compared with A (change to \"C\", ... with more runs)\n"
            "(cmp.frame.group_by(f\"change_{b}\")\n"
            " .agg(pl.len().alias(\"prompts\"), pl.col(f\"diff_{b}\").mean().alias(\"mean_diff\"),\n"
            "      pl.col(\"pass_A\").mean(), pl.col(f\"pass_{b}\").mean())\n"
            " .sort(\"prompts\", descending=True))"),
        new_code_cell(
            "px.histogram(cmp.frame.with_columns(pl.col(\"level\").cast(pl.Utf8).fill_null(pl.col(\"tag\"))),\n"
            "             x=\"level\", color=f\"change_{b}\", barmode=\"group\",\n"
            "             title=f\"Prompts by level (or source tag) and change, {b} against A\")"),
        new_code_cell(
            "px.scatter(cmp.frame.drop_nulls([\"pass_A\", f\"pass_{b}\"]), x=\"pass_A\", y=f\"pass_{b}\",\n"
            "           color=f\"change_{b}\", hover_data=[\"prompt\", \"level\"], range_x=[-0.05, 1.05],\n"
            "           range_y=[-0.05, 1.05], title=f\"Training pass rate per prompt, {b} against A\")"),
        new_code_cell(
            "(cmp.frame.filter(pl.col(f\"change_{b}\").str.starts_with(\"learned\") | pl.col(f\"change_{b}\").str.starts_with(\"lost\"))\n"
            " .select(\"prompt\", \"level\", \"tag\", \"pass_A\", f\"pass_{b}\", f\"diff_{b}\", f\"diff_{b}_lo\", f\"diff_{b}_hi\",\n"
            "         f\"change_{b}\", \"eval_pass_A\", f\"eval_pass_{b}\")\n"
            " .sort(f\"diff_{b}\", descending=True))"),
    ]


NOTEBOOKS = {"entropy.ipynb": entropy, "pass_at_k.ipynb": pass_at_k, "allocators.ipynb": allocators}


def build(name: str):
    nb = new_notebook(cells=NOTEBOOKS[name]())
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{Path(name).stem.replace('_', '-')}-{i:02d}"
    return nb


def main() -> None:
    for name in NOTEBOOKS:
        nbformat.write(build(name), HERE / name)
        print(f"wrote notebooks/{name}", file=sys.stderr)


if __name__ == "__main__":
    main()
