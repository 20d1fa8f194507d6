"""Alerts: what the guards of every run (or one) raised, open / acknowledged / acted on, each with the
values that fired it, what its action did, and one click to the Rollouts page filtered to exactly the
rollouts behind it; acknowledge an alert; add a guard to a live run (checked before anything is stored).
A click on a point of the metric's curve opens that step's rollouts (components.drill_to_step)."""

import json

import streamlit as st

from app import permissions, charts, components, data, derive
from workbench.metrics import PRESENT, lookup

PAGE = "alerts"
STATUSES = ["open", "acknowledged", "acted", "any"]

st.title("Alerts")
runs, labels = data.run_options()
wanted = st.query_params.get("run")
choices = ["every run", *runs]
c1, c2 = st.columns([3, 1])
scope = c1.selectbox("run", choices, index=choices.index(wanted) if wanted in choices else 0,
                     format_func=lambda r: labels.get(r, r), key=f"{PAGE}_scope")
status = c2.selectbox("status", STATUSES, key=f"{PAGE}_status")
frame = data.alerts(None if scope == "every run" else scope, None if status == "any" else status)

SHOWN = 20
"""Alerts drawn at first, newest first (a run whose guard fires every few steps has hundreds)."""

if frame.is_empty():
    st.info("No alerts. Guards (docs/guards.md) raise one when their rule holds for their window.")
elif frame.height > SHOWN:
    shown = st.number_input(f"alerts shown (newest first, of {frame.height})", 1, frame.height, SHOWN, step=SHOWN,
                            key=f"{PAGE}_shown")
    frame = frame.head(int(shown))
for row in frame.to_dicts():
    with st.container(border=True):
        head = f"**{row['guard']}** · {row['status']} · {row['action']} · run {data.short_id(row['run_id'])}"
        st.markdown(head)
        st.text(row["message"])
        if row.get("outcome"):
            st.caption(f"action: {row['outcome']}")
        if row.get("hint"):
            st.caption(f"what would help: {row['hint']}")
        with st.expander("values that fired it"):
            st.json(json.loads(row["evidence"]) if row.get("evidence") else {})
        b1, b2 = st.columns([1, 3])
        if (row["status"] == "open" and b1.button("acknowledge", key=f"{PAGE}_ack_{row['alert_id']}",
                                                  disabled=not permissions.can_control())
                and permissions.allowed(PAGE, "acknowledge", row["run_id"])):
            data.store().set_alert_status(row["alert_id"], "acknowledged")
            data.alerts.clear()
            st.rerun()
        where = row.get("steps_run_id") or row["run_id"]
        if row.get("rollouts"):
            b2.page_link("app_pages/rollouts.py", label=f"its {row['rollouts']} rollouts", icon=":material/chat:",
                         query_params={"run": where, "alert": row["alert_id"]})
        else:
            b2.page_link("app_pages/rollouts.py", label=f"the rollouts of steps {row['first_step']}-{row['step']}",
                         icon=":material/chat:",
                         query_params={"run": where, "steps": f"{row['first_step']}-{row['step']}"})

st.subheader("Add a guard to a run")
run_id = components.pick_run(f"{PAGE}_form", label="run to guard")
if run_id:
    run_steps = data.steps((run_id,))
    choices = derive.metric_choices(run_steps)
    if choices:  # what a rule may read, with its meaning, and the run's values so far (a threshold)
        metric = st.selectbox("metric a rule may read", choices, key=f"{PAGE}_metric")
        info = lookup(metric)
        st.caption(f"{info.meaning} ({info.unit}; {PRESENT[info.present]}; recorded by {info.recorder})"
                   if info else "recorded by this run; not in the catalogue of step metrics (docs/metrics.md)")
        event = st.plotly_chart(charts.line_chart(derive.metric_series(run_steps, metric), [(metric, metric)], metric),
                                key=f"{PAGE}_metric_chart", **components.DRILL)
        components.drill_to_step(run_id, event)  # a point: that step's rollouts
    with st.form(f"{PAGE}_guard"):
        name = st.text_input("name", key=f"{PAGE}_guard_name", placeholder="loss_spike")
        rule = st.text_input("rule (one line)", key=f"{PAGE}_guard_rule",
                             placeholder="train/loss > 5 * mean(train/loss, 10)")
        g1, g2, g3, g4 = st.columns(4)
        window = g1.number_input("window (steps in a row)", min_value=1, value=1, step=1, key=f"{PAGE}_guard_window")
        action = g2.selectbox("action", ["alert", "pause", "rollback", "stop"], key=f"{PAGE}_guard_action")
        temperature = g3.number_input("rollback: temperature after", value=None, min_value=0.01,
                                      key=f"{PAGE}_guard_temperature")
        lr = g4.number_input("rollback: learning rate after", value=None, min_value=0.0, format="%.2e",
                             key=f"{PAGE}_guard_lr")
        submitted = st.form_submit_button("Check and add", icon=":material/add_alert:",
                                          disabled=not permissions.can_control())
    permissions.note_if_read_only()
    if submitted:
        from workbench.control.guards import issue_guard

        spec = {"name": name.strip(), "rule": rule.strip(), "window": int(window), "action": action}
        settings = {k: float(v) for k, v in (("temperature", temperature), ("lr", lr)) if v is not None}
        if settings:
            spec["settings"] = settings
        components.send(PAGE, issue_guard, run_id, {"op": "add", "guard": spec})
